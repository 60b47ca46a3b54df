// The byte messages of expert parallelism: round trips, and refusals of damaged messages
// (every decode of a mutated message succeeds or throws Error, never reads out of bounds).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "dist/expert_messages.h"
#include "support/error_of.h"

namespace moex::dist {
namespace {

using testing::ErrorOf;

LayerMessage Sample(const std::vector<float>& rows) {
  LayerMessage m;
  m.kind = MessageKind::kOutputs;
  m.layer = 7;
  m.experts = {{3, 2}, {9, 1}};
  m.counters.experts_computed = 5;
  m.counters.compute_ms = 1.5;
  m.counters.peak_rss_bytes = 1 << 20;
  m.rows = rows;
  return m;
}

TEST(ExpertMessagesTest, ALayerMessageRoundTripsBitForBit) {
  const std::vector<float> rows = {1.0f, -0.0f, 3.5f, 1e-42f, -7.0f, 8.25f};  // 3 rows of 2.
  const std::vector<std::byte> bytes = EncodeLayer(Sample(rows));
  EXPECT_EQ(bytes.size(), 96u + 2 * 16u + 6 * 4u);
  EXPECT_EQ(KindOf(bytes), MessageKind::kOutputs);
  const LayerMessage m = DecodeLayer(bytes, 2);
  EXPECT_EQ(m.layer, 7);
  ASSERT_EQ(m.experts.size(), 2u);
  EXPECT_EQ(m.experts[0].expert, 3);
  EXPECT_EQ(m.experts[0].rows, 2);
  EXPECT_EQ(m.experts[1].expert, 9);
  EXPECT_EQ(m.counters.experts_computed, 5);
  EXPECT_EQ(m.counters.compute_ms, 1.5);
  ASSERT_EQ(m.rows.size(), rows.size());
  EXPECT_EQ(std::memcmp(m.rows.data(), rows.data(), sizeof(float) * rows.size()), 0);
}

// A request: three rows (expert 4 takes tokens A and B, expert 6 token B again) carry two
// distinct token rows; the indices are padded to 8 bytes before the rows.
TEST(ExpertMessagesTest, ARequestSendsEachTokenRowOnce) {
  const std::vector<int32_t> token_of_row = {0, 1, 1};
  const std::vector<float> tokens = {1, 2, 3, 4};  // Two rows of 2.
  LayerMessage m;
  m.kind = MessageKind::kLayer;
  m.layer = 2;
  m.experts = {{4, 2}, {6, 1}};
  m.token_rows = 2;
  m.token_of_row = token_of_row;
  m.rows = tokens;
  const std::vector<std::byte> bytes = EncodeLayer(m);
  EXPECT_EQ(bytes.size(), 96u + 2 * 16u + 16u + 4 * 4u);
  const LayerMessage back = DecodeLayer(bytes, 2);
  EXPECT_EQ(back.token_rows, 2);
  EXPECT_EQ(std::vector<int32_t>(back.token_of_row.begin(), back.token_of_row.end()), token_of_row);
  EXPECT_EQ(std::vector<float>(back.rows.begin(), back.rows.end()), tokens);
  // A token index past the distinct rows is refused.
  const std::vector<int32_t> bad = {0, 2, 1};
  m.token_of_row = bad;
  EXPECT_NE(ErrorOf([&] { DecodeLayer(EncodeLayer(m), 2); }).find("names token row 2 of 2"),
            std::string::npos);
}

TEST(ExpertMessagesTest, ATextMessageRoundTrips) {
  TextMessage t{MessageKind::kFailure, "expert 3 of layer 1 is not held here", {}};
  t.counters.rows_computed = 12;
  const TextMessage back = DecodeText(EncodeText(t));
  EXPECT_EQ(back.kind, MessageKind::kFailure);
  EXPECT_EQ(back.text, t.text);
  EXPECT_EQ(back.counters.rows_computed, 12);
}

TEST(ExpertMessagesTest, DamagedMessagesAreRefusedWithTheReason) {
  const std::vector<float> rows(6, 1.0f);
  std::vector<std::byte> bytes = EncodeLayer(Sample(rows));
  EXPECT_NE(ErrorOf([&] { DecodeLayer(bytes, 3); }).find("need 36"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { DecodeLayer(bytes, 1); }).find("need 12"), std::string::npos);
  std::vector<std::byte> cut(bytes.begin(), bytes.begin() + 116);  // In the expert list.
  EXPECT_NE(ErrorOf([&] { DecodeLayer(cut, 2); }).find("cut short"), std::string::npos);
  std::vector<std::byte> tiny(bytes.begin(), bytes.begin() + 10);
  EXPECT_NE(ErrorOf([&] { KindOf(tiny); }).find("shorter than its header"), std::string::npos);
  std::vector<std::byte> alien = bytes;
  alien[0] = std::byte{0};
  EXPECT_NE(ErrorOf([&] { KindOf(alien); }).find("bad magic"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { DecodeText(bytes); }).find("got a layer message"), std::string::npos);
  const std::vector<std::byte> text = EncodeText({MessageKind::kHello, "x", {}});
  EXPECT_NE(ErrorOf([&] { DecodeLayer(text, 2); }).find("expected a layer message"),
            std::string::npos);
}

TEST(ExpertMessagesTest, MutatedMessagesNeverCrash) {
  const std::vector<float> rows(6, 2.0f);
  const std::vector<std::byte> layer = EncodeLayer(Sample(rows));
  const std::vector<std::byte> text = EncodeText({MessageKind::kVerdict, "ok\n{}", {}});
  const std::vector<int32_t> token_of_row = {0, 1, 0};
  const std::vector<float> tokens = {1, 2, 3, 4};
  LayerMessage request;
  request.experts = {{1, 2}, {5, 1}};
  request.token_rows = 2;
  request.token_of_row = token_of_row;
  request.rows = tokens;
  const std::vector<std::byte> ask = EncodeLayer(request);
  std::mt19937_64 rng(45);
  int decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> s = i % 3 == 0 ? layer : i % 3 == 1 ? ask : text;
    for (int m = 0; m < 1 + static_cast<int>(rng() % 3); ++m) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[at] = static_cast<std::byte>(rng());
          break;
        case 1:
          s.resize(at);
          break;
        default:
          s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::byte>(rng()));
      }
      if (s.empty()) break;
    }
    try {
      if (KindOf(s) == MessageKind::kLayer || KindOf(s) == MessageKind::kOutputs) {
        const LayerMessage m = DecodeLayer(s, 2);
        int64_t total = 0;
        for (const ExpertSpan& e : m.experts) total += e.rows;
        if (m.kind == MessageKind::kLayer) {
          ASSERT_EQ(static_cast<int64_t>(m.token_of_row.size()), total);
          ASSERT_EQ(static_cast<int64_t>(m.rows.size()), m.token_rows * 2);
          for (int32_t t : m.token_of_row) ASSERT_LT(t, m.token_rows);
        } else {
          ASSERT_EQ(static_cast<int64_t>(m.rows.size()), total * 2);
        }
      } else {
        DecodeText(s);
      }
      ++decoded;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace moex::dist

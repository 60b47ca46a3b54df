// The policy events rank 0 relays to the workers (dist/event_messages.h): a batch replays
// the same events in the same order, with only the fields asked for; sizes are
// hand-computed; a damaged batch is refused with an error, never read out of bounds.
#include <gtest/gtest.h>

#include <random>
#include <span>
#include <string>
#include <vector>

#include "dist/event_messages.h"
#include "policy/registry.h"
#include "support/error_of.h"

namespace moex::dist {
namespace {

using testing::ErrorOf;

// Every event as text, fields included, so a replay can be compared with what was added.
class Recorder final : public policy::EventSink {
 public:
  std::vector<std::string> seen;

  void OnRequestBegin(const policy::RequestBeginEvent& e) override {
    seen.push_back("request_begin " + std::to_string(e.request) + Ints(e.prompt, e.prompt_len));
  }
  void OnIterationBegin(const policy::IterationBeginEvent& e) override {
    seen.push_back("iteration_begin " + std::to_string(e.iteration) +
                   Ints(e.requests, e.n_requests) + Ints(e.token_counts, e.n_requests) +
                   Ints(e.tokens, e.n_tokens) + " d=" + std::to_string(e.d) +
                   Floats(e.pooled, e.pooled ? e.n_requests * e.d : 0));
  }
  void OnGate(const policy::GateEvent& e) override {
    seen.push_back("gate " + std::to_string(e.layer) + " n=" + std::to_string(e.n_tokens) +
                   " k=" + std::to_string(e.top_k) + " E=" + std::to_string(e.num_experts) +
                   Ints(e.ids, e.n_tokens * e.top_k) + Floats(e.weights, e.n_tokens * e.top_k) +
                   Floats(e.probs, e.probs ? e.n_tokens * e.num_experts : 0) +
                   " d=" + std::to_string(e.d) + Floats(e.hidden, e.hidden ? e.n_tokens * e.d : 0) +
                   " routed" + Ints(e.routed, e.n_routed));
  }
  void OnIterationEnd() override { seen.push_back("iteration_end"); }
  void OnRequestEnd(const policy::RequestEndEvent& e) override {
    seen.push_back("request_end " + std::to_string(e.request));
  }

 private:
  template <typename T>
  static std::string Ints(const T* v, int64_t n) {
    std::string s = " [";
    for (int64_t i = 0; i < n; ++i) s += std::to_string(v[i]) + ",";
    return s + "]";
  }
  static std::string Floats(const float* v, int64_t n) {
    std::string s = " (";
    for (int64_t i = 0; i < n; ++i) s += std::to_string(v[i]) + ",";
    return s + ")";
  }
};

struct Sample {
  std::vector<int32_t> prompt = {1, 2, 3};
  std::vector<int64_t> requests = {7};
  std::vector<int64_t> counts = {3};
  std::vector<float> pooled = {0.5f, -1.0f};
  std::vector<int32_t> ids = {2, 0, 3, 2};
  std::vector<float> weights = {0.75f, 0.25f, 0.5f, 0.5f};
  std::vector<float> probs = {0.1f, 0.2f, 0.3f, 0.4f, 0.4f, 0.3f, 0.2f, 0.1f};
  std::vector<float> hidden = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<int32_t> routed = {0, 2, 3};

  void AddTo(policy::EventSink& sink) const {
    sink.OnRequestBegin({7, prompt.data(), 3});
    policy::IterationBeginEvent it;
    it.iteration = 4;
    it.n_requests = 1;
    it.requests = requests.data();
    it.token_counts = counts.data();
    it.tokens = prompt.data();
    it.n_tokens = 3;
    it.pooled = pooled.data();
    it.d = 2;
    sink.OnIterationBegin(it);
    sink.OnGate(Gate());
    sink.OnIterationEnd();
    sink.OnRequestEnd({7});
  }
  policy::GateEvent Gate() const {
    policy::GateEvent g;
    g.layer = 1;
    g.n_tokens = 2;
    g.top_k = 2;
    g.num_experts = 4;
    g.ids = ids.data();
    g.weights = weights.data();
    g.probs = probs.data();
    g.hidden = hidden.data();
    g.d = 2;
    g.routed = routed.data();
    g.n_routed = 3;
    return g;
  }
};

// Feeds a sink's events into a batch.
class Batcher final : public policy::EventSink {
 public:
  explicit Batcher(unsigned fields) : batch(fields) {}
  EventBatch batch;
  void OnRequestBegin(const policy::RequestBeginEvent& e) override { batch.Add(e); }
  void OnIterationBegin(const policy::IterationBeginEvent& e) override { batch.Add(e); }
  void OnGate(const policy::GateEvent& e) override { batch.Add(e); }
  void OnIterationEnd() override { batch.AddIterationEnd(); }
  void OnRequestEnd(const policy::RequestEndEvent& e) override { batch.Add(e); }
};

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(EventMessagesTest, ABatchReplaysTheSameEventsInOrderWithTheRoutedSetDerived) {
  const Sample sample;
  Recorder want;
  sample.AddTo(want);
  Batcher b(policy::kNeedsProbs | policy::kNeedsHidden | policy::kNeedsPooled);
  sample.AddTo(b);
  EXPECT_EQ(b.batch.events(), 5);
  const std::string bytes = b.batch.Take();
  EXPECT_TRUE(b.batch.empty());
  // Each record is a 4-byte type, and each array an 8-byte count before its values:
  // request_begin 4 + 8 + (8 + 3x4) = 32; iteration_begin 4 + 8 + (8 + 8) + (8 + 8) +
  // (8 + 12) + 8 + (8 + 2x4) = 88; gate 4 + 3x4 + 8 + (8 + 16) + (8 + 16) + (8 + 32) + 8 +
  // (8 + 16) = 144; iteration_end 4; request_end 4 + 8 = 12.
  EXPECT_EQ(bytes.size(), 32u + 88u + 144u + 4u + 12u);
  Recorder got;
  EXPECT_EQ(ReplayEvents(Bytes(bytes), got), 5);
  EXPECT_EQ(got.seen, want.seen);
}

TEST(EventMessagesTest, FieldsNotAskedForDoNotTravel) {
  const Sample sample;
  Batcher b(0);
  b.batch.Add(sample.Gate());
  const std::string bytes = b.batch.Take();
  EXPECT_EQ(bytes.size(), 144u - 32u - 16u);  // No probabilities, no gate inputs.
  Recorder got;
  ReplayEvents(Bytes(bytes), got);
  ASSERT_EQ(got.seen.size(), 1u);
  EXPECT_EQ(got.seen[0],
            "gate 1 n=2 k=2 E=4 [2,0,3,2,] (0.750000,0.250000,0.500000,0.500000,) () d=0 () "
            "routed [0,2,3,]");
}

TEST(EventMessagesTest, ADamagedBatchIsRefusedNamingWhatIsWrong) {
  const Sample sample;
  Batcher b(policy::kNeedsProbs | policy::kNeedsHidden);
  b.batch.Add(sample.Gate());
  const std::string good = b.batch.Take();
  Recorder sink;
  EXPECT_NE(ErrorOf([&] {
              ReplayEvents(Bytes(good.substr(0, 20)), sink);
            }).find("cut short in a token count"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              ReplayEvents(Bytes(good.substr(0, good.size() - 3)), sink);
            }).find("more than its 13 bytes left carry"),
            std::string::npos);
  std::string bad_id = good;
  bad_id[4 + 12 + 8 + 8] = 9;  // The first routed id: expert 9 of 4.
  EXPECT_NE(ErrorOf([&] { ReplayEvents(Bytes(bad_id), sink); }).find("routes to expert 9 of 4"),
            std::string::npos);
  std::string unknown = good;
  unknown[0] = 42;
  EXPECT_NE(ErrorOf([&] { ReplayEvents(Bytes(unknown), sink); }).find("unknown type 42"),
            std::string::npos);
  std::string huge = good;
  huge[4 + 12 + 7] = 0x7f;  // n_tokens far beyond the bytes.
  EXPECT_NE(ErrorOf([&] { ReplayEvents(Bytes(huge), sink); }).find("more than its"),
            std::string::npos);
  EXPECT_TRUE(sink.seen.empty());
}

TEST(EventMessagesTest, EveryMutatedBatchReplaysOrIsRefused) {
  const Sample sample;
  Batcher b(policy::kNeedsProbs | policy::kNeedsHidden | policy::kNeedsPooled);
  sample.AddTo(b);
  const std::string good = b.batch.Take();
  std::mt19937_64 rng(46);
  int replayed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = good;
    for (int m = 0; m < 1 + static_cast<int>(rng() % 3) && !s.empty(); ++m) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[at] = static_cast<char>(rng());
          break;
        case 1:
          s.resize(at);
          break;
        default:
          s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), static_cast<char>(rng()));
      }
    }
    Recorder sink;
    try {
      ReplayEvents(Bytes(s), sink);
      ++replayed;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(replayed, 0);
}

}  // namespace
}  // namespace moex::dist

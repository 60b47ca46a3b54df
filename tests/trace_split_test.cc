// `moex trace split`: requests go whole to one part, in the order they began; batched
// iterations that mix the parts are cut per request with every row kept exactly.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "support/run_command.h"
#include "support/temp_dir.h"
#include "trace/trace_reader.h"
#include "trace/trace_split.h"
#include "trace/trace_writer.h"

namespace moex::trace {
namespace {

TraceHeader ToyHeader() {
  TraceHeader h;
  h.source = "test";
  h.model.name = "toy";
  h.model.num_layers = 1;
  h.model.moe_layers = {0};
  h.model.num_experts = 3;
  h.model.top_k = 1;
  h.model.hidden_size = 2;
  h.model.expert_neurons = 4;
  h.model.record_bytes = 12;
  h.model.block_neurons = 4;
  h.model.dtype = "bf16";
  h.probs = Precision::kF32;
  h.hidden = Precision::kF32;
  h.pooled = true;
  return h;
}

TraceEvent Begin(int64_t request) {
  TraceEvent e;
  e.kind = TraceEvent::kRequestBegin;
  e.request = request;
  e.prompt = {static_cast<int32_t>(100 + request)};
  return e;
}

TraceEvent End(int64_t request) {
  TraceEvent e;
  e.kind = TraceEvent::kRequestEnd;
  e.request = request;
  return e;
}

// One pass over `requests`, each with `counts` tokens; token t of the pass is routed to
// expert t % 3 and every per-token value encodes t so that a misplaced row shows.
TraceEvent Pass(int64_t index, std::vector<int64_t> requests, std::vector<int64_t> counts) {
  TraceEvent e;
  e.kind = TraceEvent::kIteration;
  TraceIteration& it = e.iteration;
  it.iteration = index;
  it.requests = requests;
  it.token_counts = counts;
  TraceGate g;
  g.layer = 0;
  g.top_k = 1;
  int t = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    it.pooled.insert(it.pooled.end(), {static_cast<float>(requests[r]), 0.5f});
    for (int64_t i = 0; i < counts[r]; ++i, ++t) {
      it.tokens.push_back(10 * static_cast<int32_t>(index) + t);
      g.ids.push_back(t % 3);
      g.weights.push_back(1.0f);
      g.probs.insert(g.probs.end(), {static_cast<float>(t), 0.0f, 1.0f});
      g.hidden.insert(g.hidden.end(), {static_cast<float>(t), -static_cast<float>(t)});
    }
  }
  g.n_tokens = t;
  it.gates.push_back(g);
  return e;
}

std::vector<TraceEvent> ReadAll(const std::string& path) {
  TraceReader reader(path);
  std::vector<TraceEvent> events;
  TraceEvent e;
  while (reader.Next(&e)) events.push_back(e);
  return events;
}

class TraceSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TraceWriter w(input_, ToyHeader());
    // Requests 0, 1 and 2 prefill together (2, 1 and 1 tokens), then decode one token each;
    // request 0 ends first.
    for (int64_t r = 0; r < 3; ++r) w.Write(Begin(r));
    w.Write(Pass(0, {0, 1, 2}, {2, 1, 1}));
    w.Write(End(0));
    w.Write(Pass(1, {1, 2}, {1, 1}));
    w.Write(End(1));
    w.Write(End(2));
    w.Finish();
  }
  testing::TempDir dir_;
  std::string input_ = dir_ / "all.trace";
  std::string learn_ = dir_ / "learn.trace";
  std::string test_ = dir_ / "test.trace";
};

TEST_F(TraceSplitTest, RequestsGoWholeToOnePartInTheOrderTheyBegan) {
  // 70 % of 3 requests is 2.1: requests 0 and 1 learn, request 2 tests.
  const SplitSummary s = SplitTrace({input_, learn_, test_, 0.7});
  EXPECT_EQ(s.learn.requests, 2);
  EXPECT_EQ(s.learn.first_request, 0);
  EXPECT_EQ(s.learn.last_request, 1);
  EXPECT_EQ(s.learn.iterations, 2);
  EXPECT_EQ(s.test.requests, 1);
  EXPECT_EQ(s.test.first_request, 2);
  EXPECT_EQ(s.test.iterations, 2);

  const std::vector<TraceEvent> learn = ReadAll(learn_);
  ASSERT_EQ(learn.size(), 6u);  // Begin 0, begin 1, pass, end 0, pass, end 1.
  const TraceIteration& first = learn[2].iteration;
  EXPECT_EQ(first.iteration, 0);
  EXPECT_EQ(first.requests, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(first.token_counts, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(first.tokens, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(first.pooled, (std::vector<float>{0, 0.5f, 1, 0.5f}));
  ASSERT_EQ(first.gates.size(), 1u);
  EXPECT_EQ(first.gates[0].n_tokens, 3);
  EXPECT_EQ(first.gates[0].ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(first.gates[0].hidden, (std::vector<float>{0, 0, 1, -1, 2, -2}));
  EXPECT_EQ(learn[4].iteration.requests, (std::vector<int64_t>{1}));
  EXPECT_EQ(learn[4].iteration.tokens, (std::vector<int32_t>{10}));
  EXPECT_EQ(learn[5].kind, TraceEvent::kRequestEnd);

  const std::vector<TraceEvent> test = ReadAll(test_);
  ASSERT_EQ(test.size(), 4u);  // Begin 2, pass, pass, end 2.
  EXPECT_EQ(test[0].request, 2);
  EXPECT_EQ(test[0].prompt, (std::vector<int32_t>{102}));
  const TraceIteration& prefill = test[1].iteration;
  EXPECT_EQ(prefill.iteration, 0);
  EXPECT_EQ(prefill.requests, (std::vector<int64_t>{2}));
  EXPECT_EQ(prefill.tokens, (std::vector<int32_t>{3}));  // The pass's fourth token.
  EXPECT_EQ(prefill.pooled, (std::vector<float>{2, 0.5f}));
  EXPECT_EQ(prefill.gates[0].ids, (std::vector<int32_t>{0}));  // 3 % 3.
  EXPECT_EQ(prefill.gates[0].probs, (std::vector<float>{3, 0, 1}));
  EXPECT_EQ(test[2].iteration.iteration, 1);
  EXPECT_EQ(test[2].iteration.tokens, (std::vector<int32_t>{11}));
  EXPECT_EQ(test[2].iteration.gates[0].ids, (std::vector<int32_t>{1}));

  TraceReader header(test_);
  EXPECT_EQ(header.header().info["split"]["part"], "test");
  EXPECT_EQ(header.header().info["split"]["first_request"], 2);
}

TEST_F(TraceSplitTest, EveryPartKeepsAtLeastOneRequest) {
  const SplitSummary s = SplitTrace({input_, learn_, test_, 0.99});
  EXPECT_EQ(s.learn.requests, 2);
  EXPECT_EQ(s.test.requests, 1);
}

TEST_F(TraceSplitTest, BadArgumentsAreClearErrorsAndWriteNothing) {
  EXPECT_THROW(SplitTrace({input_, learn_, test_, 1.0}), Error);
  EXPECT_THROW(SplitTrace({input_, learn_, test_, 0.0}), Error);
  EXPECT_THROW(SplitTrace({input_, learn_, learn_, 0.7}), Error);
  EXPECT_THROW(SplitTrace({input_, input_, test_, 0.7}), Error);
  EXPECT_THROW(SplitTrace({dir_ / "missing.trace", learn_, test_, 0.7}), Error);
  EXPECT_FALSE(std::filesystem::exists(learn_));
  EXPECT_FALSE(std::filesystem::exists(test_));

  const std::string single = dir_ / "one.trace";
  TraceWriter w(single, ToyHeader());
  w.Write(Begin(0));
  w.Write(Pass(0, {0}, {1}));
  w.Write(End(0));
  w.Finish();
  try {
    SplitTrace({single, learn_, test_, 0.7});
    FAIL() << "a one-request trace was split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least two"), std::string::npos) << e.what();
  }
}

TEST_F(TraceSplitTest, CommandLinePrintsBothParts) {
  const testing::CommandResult r =
      testing::RunCommand(testing::MoexBinary() + " trace split " + input_ + " --learn " + learn_ +
                          " --test " + test_ + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"first_request\": 2"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(learn_));
}

}  // namespace
}  // namespace moex::trace

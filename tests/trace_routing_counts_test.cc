// The routed-token counts a balanced expert placement spreads: every (token, top-k slot) of
// every gate counted once, per layer and expert.
#include <gtest/gtest.h>

#include "model/model.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"
#include "trace/routing_counts.h"
#include "trace/trace_recorder.h"
#include "trace/trace_writer.h"

namespace moex {
namespace {

TEST(RoutingCountsTest, CountsEveryRoutedSlotPerLayerAndExpert) {
  const auto model = LoadModel(testing::TinyModelPath(Arch::kOlmoe));
  const int k = model->config.num_experts_per_tok, experts = model->config.num_experts;
  ASSERT_LT(k, experts);
  testing::TempDir dir;
  trace::TraceHeader h;
  h.source = "test";
  h.model = trace::TraceModelOf(*model);
  trace::TraceWriter writer(dir / "t.trace", h);
  trace::TraceEvent begin;
  begin.kind = trace::TraceEvent::kRequestBegin;
  begin.request = 1;
  begin.prompt = {1, 2};
  writer.Write(begin);
  // Two tokens: the first routed to experts 0..k-1, the second to 1..k.
  trace::TraceEvent pass;
  pass.kind = trace::TraceEvent::kIteration;
  pass.iteration.requests = {1};
  pass.iteration.token_counts = {2};
  pass.iteration.tokens = {1, 2};
  for (int layer : h.model.moe_layers) {
    trace::TraceGate gate;
    gate.layer = layer;
    gate.n_tokens = 2;
    gate.top_k = k;
    for (int t = 0; t < 2; ++t)
      for (int j = 0; j < k; ++j) gate.ids.push_back(t + j);
    gate.weights.assign(static_cast<size_t>(2 * k), 1.0f / static_cast<float>(k));
    pass.iteration.gates.push_back(gate);
  }
  writer.Write(pass);
  trace::TraceEvent end;
  end.kind = trace::TraceEvent::kRequestEnd;
  end.request = 1;
  writer.Write(end);
  writer.Finish();

  trace::TraceReader reader(dir / "t.trace");
  const std::vector<std::vector<int64_t>> counts = trace::RoutedTokenCounts(reader);
  ASSERT_EQ(counts.size(), static_cast<size_t>(model->config.num_layers));
  for (int l = 0; l < model->config.num_layers; ++l) {
    if (!model->layers[static_cast<size_t>(l)].is_moe) {
      EXPECT_TRUE(counts[static_cast<size_t>(l)].empty());
      continue;
    }
    std::vector<int64_t> want(static_cast<size_t>(experts), 0);
    want[0] = 1;
    for (int e = 1; e < k; ++e) want[static_cast<size_t>(e)] = 2;
    want[static_cast<size_t>(k)] = 1;
    EXPECT_EQ(counts[static_cast<size_t>(l)], want) << "layer " << l;
  }
}

}  // namespace
}  // namespace moex

// The expert-activity observer and the cache view the web page draws, on hand-made gates
// and hand-made offload counters.
#include <gtest/gtest.h>

#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serve/cache_view.h"
#include "serve/expert_activity.h"
#include "support/policy_events.h"

namespace moex::serve {
namespace {

using nlohmann::json;

policy::GateEvent Gate(int layer, int64_t n_tokens, int top_k, const std::vector<int32_t>& ids) {
  policy::GateEvent e;
  e.layer = layer;
  e.n_tokens = n_tokens;
  e.top_k = top_k;
  e.num_experts = 4;
  e.ids = ids.data();
  return testing::Routed(e);
}

TEST(ServeExpertActivity, CountsTokensPerExpertAndDistinctExpertsPerGate) {
  ExpertActivity a(3, 4);
  // Three tokens, top-2, on layer 2: expert 0 twice, 2 three times, 3 once; 3 distinct.
  const std::vector<int32_t> first = {0, 2, 2, 3, 0, 2};
  a.OnGate(Gate(2, 3, 2, first));
  EXPECT_EQ(a.activations(2, 0), 2);
  EXPECT_EQ(a.activations(2, 1), 0);
  EXPECT_EQ(a.activations(2, 2), 3);
  EXPECT_EQ(a.activations(2, 3), 1);
  EXPECT_EQ(a.accesses(2), 3);
  EXPECT_EQ(a.accesses(0), 0);
  // Another gate of the same layer adds: expert 1 is new, 2 is accessed again.
  const std::vector<int32_t> second = {1, 2};
  a.OnGate(Gate(2, 1, 2, second));
  EXPECT_EQ(a.activations(2, 1), 1);
  EXPECT_EQ(a.activations(2, 2), 4);
  EXPECT_EQ(a.accesses(2), 5);
  EXPECT_EQ(a.gates(), 2);
  for (int e = 0; e < 4; ++e) EXPECT_EQ(a.activations(0, e), 0);
}

// Each pass reports its distinct experts summed over its gates, and whether it only decoded.
TEST(ServeExpertActivity, ReportsActivatedExpertsPerPass) {
  ExpertActivity a(3, 4);
  std::vector<std::pair<int64_t, bool>> passes;
  a.set_pass_callback([&](int64_t n, bool decode_only) { passes.push_back({n, decode_only}); });
  policy::IterationBeginEvent decode;
  decode.n_requests = 2;
  decode.n_tokens = 2;
  a.OnIterationBegin(decode);
  const std::vector<int32_t> first = {0, 1, 1, 2};   // Layer 0: {0,1,2} = 3.
  const std::vector<int32_t> second = {3, 3, 3, 3};  // Layer 2: {3} = 1.
  a.OnGate(Gate(0, 2, 2, first));
  a.OnGate(Gate(2, 2, 2, second));
  a.OnIterationEnd();
  policy::IterationBeginEvent prefill;  // One request, two prompt tokens.
  prefill.n_requests = 1;
  prefill.n_tokens = 2;
  a.OnIterationBegin(prefill);
  a.OnGate(Gate(0, 2, 2, second));
  a.OnIterationEnd();
  EXPECT_EQ(passes, (std::vector<std::pair<int64_t, bool>>{{4, true}, {1, false}}));
}

TEST(ServeExpertActivity, GateOutsideTheShapeIsAnError) {
  ExpertActivity a(2, 4);
  const std::vector<int32_t> ids = {0};
  EXPECT_THROW(a.OnGate(Gate(2, 1, 1, ids)), Error);
  EXPECT_EQ(a.gates(), 0);
}

TEST(ServeCacheView, ResidentModelCountsEveryAccessAsAHit) {
  ExpertActivity a(3, 4);
  const std::vector<int32_t> ids = {0, 1, 0, 3};
  a.OnGate(Gate(0, 2, 2, ids));  // 3 distinct experts.
  a.OnGate(Gate(2, 1, 2, ids));  // 2 distinct.
  // Layer 1 is dense: an empty row.
  const std::vector<std::vector<float>> resident = {{1, 1, 1, 1}, {}, {1, 1, 1, 1}};
  const json v = CacheViewJson({{"policy", "resident"}, {"hits", 5}}, a, resident);
  EXPECT_EQ(v["offloaded"], false);
  EXPECT_EQ(v["policy"], "resident");
  EXPECT_EQ(v["num_experts"], 4);
  ASSERT_EQ(v["layers"].size(), 2u);
  EXPECT_EQ(v["layers"][0]["layer"], 0);
  EXPECT_EQ(v["layers"][0]["hits"], 3);
  EXPECT_EQ(v["layers"][0]["misses"], 0);
  EXPECT_EQ(v["layers"][0]["activations"], json({2, 1, 0, 1}));
  EXPECT_EQ(v["layers"][1]["layer"], 2);
  EXPECT_EQ(v["layers"][1]["hits"], 2);
  EXPECT_EQ(v["layers"][1]["activations"], json({1, 1, 0, 0}));
  EXPECT_EQ(v["layers"][1]["resident"], json({1.0, 1.0, 1.0, 1.0}));
  EXPECT_EQ(v["hits"], 5);
  EXPECT_EQ(v["misses"], 0);
  EXPECT_DOUBLE_EQ(v["hit_rate"].get<double>(), 1.0);
  EXPECT_FALSE(v.contains("budget_bytes"));
}

TEST(ServeCacheView, OffloadedModelTakesHitsAndMissesFromTheCache) {
  ExpertActivity a(3, 4);
  const json offload = {
      {"policy", "lru"},
      {"budget_bytes", 1000},
      {"host_cache_bytes", 750},
      {"layers",
       {{{"layer", 0}, {"hits", 3}, {"misses", 1}}, {{"layer", 2}, {"hits", 0}, {"misses", 4}}}}};
  const std::vector<std::vector<float>> resident = {{0.5f, 0, 1, 1.0f / 3}, {}, {0, 0, 0.25f, 0}};
  const json v = CacheViewJson(offload, a, resident);
  EXPECT_EQ(v["offloaded"], true);
  EXPECT_EQ(v["policy"], "lru");
  EXPECT_EQ(v["budget_bytes"], 1000);
  EXPECT_EQ(v["resident_bytes"], 750);
  ASSERT_EQ(v["layers"].size(), 2u);
  EXPECT_EQ(v["layers"][0]["hits"], 3);
  EXPECT_EQ(v["layers"][0]["misses"], 1);
  EXPECT_EQ(v["layers"][1]["hits"], 0);
  EXPECT_EQ(v["layers"][1]["misses"], 4);
  EXPECT_EQ(v["layers"][0]["resident"], json({0.5, 0.0, 1.0, 0.333}));
  EXPECT_EQ(v["layers"][1]["resident"], json({0.0, 0.0, 0.25, 0.0}));
  EXPECT_EQ(v["layers"][0]["activations"], json({0, 0, 0, 0}));
  EXPECT_EQ(v["hits"], 3);
  EXPECT_EQ(v["misses"], 5);
  EXPECT_DOUBLE_EQ(v["hit_rate"].get<double>(), 3.0 / 8.0);
}

}  // namespace
}  // namespace moex::serve

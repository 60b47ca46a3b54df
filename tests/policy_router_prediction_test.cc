// The next-gate predictor (policy/common/router_prediction.h) under DeepSeek-V3's grouped gate and
// gpt-oss's biased router: given a layer's own gate input it must pick exactly the experts
// the engine routes to, correction bias, group limit and router bias included.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/error.h"
#include "engine/router.h"
#include "model/tensor_names.h"
#include "policy/common/router_prediction.h"
#include "tiers/cache_plan.h"
#include "trace/trace_reader.h"

namespace moex {
namespace {

// One MoE layer whose router is the identity (d = E), so the gate input is the logits.
policy::PolicyFacts IdentityRouterFacts(const ModelConfig& c, std::vector<float> bias) {
  policy::PolicyFacts f;
  f.num_layers = 1;
  f.moe_layer = {1};
  f.num_experts = c.num_experts;
  f.top_k = c.num_experts_per_tok;
  f.hidden_size = c.num_experts;
  const int E = c.num_experts;
  f.router_weights = [E](int) {
    std::vector<float> w(static_cast<size_t>(E * E), 0.0f);
    for (int e = 0; e < E; ++e) w[static_cast<size_t>(e * E + e)] = 1.0f;
    return w;
  };
  f.grouped_gate = GroupedGate::Of(c);
  f.router_bias = [bias](int) { return bias; };
  return f;
}

ModelConfig V3Gate(int experts, int groups, int topk_group, int k) {
  ModelConfig c;
  c.num_experts = experts;
  c.num_experts_per_tok = k;
  c.router = RouterKind::kGroupedTopK;
  c.scoring_func = ScoringFunc::kSigmoid;
  c.topk_method = TopKMethod::kNoauxTc;
  c.n_group = groups;
  c.topk_group = topk_group;
  c.norm_topk_prob = true;
  return c;
}

std::set<int32_t> Predicted(const policy::PolicyFacts& f, const std::vector<float>& x) {
  const policy::RouterTable table(f, "test");
  const auto p = table.Predict(0, x.data(), 1, static_cast<int64_t>(x.size()));
  return {p.topk.begin(), p.topk.end()};
}

TEST(RouterPrediction, AppliesTheCorrectionBiasAndTheGroupLimit) {
  // 8 experts in 2 groups of 4, one group kept, top-2; sigmoid scores.
  const ModelConfig c = V3Gate(8, 2, 1, 2);
  // The two largest logits are experts 0 and 1 (group 0, top-2 sum 0.881 + 0.870 = 1.751
  // against group 1's 0.622 + 0.599 = 1.221) ...
  const std::vector<float> x = {2.0f, 1.9f, -1.0f, -1.0f, 0.5f, 0.4f, 0.3f, 0.2f};
  EXPECT_EQ(Predicted(IdentityRouterFacts(c, {}), x), (std::set<int32_t>{0, 1}));
  // ... but a bias of 0.5 on experts 4 and 5 lifts group 1 to 1.122 + 1.099 = 2.221.
  const std::vector<float> bias = {0, 0, 0, 0, 0.5f, 0.5f, 0, 0};
  EXPECT_EQ(Predicted(IdentityRouterFacts(c, bias), x), (std::set<int32_t>{4, 5}));
  // Without bias, the group limit alone: the two best logits (experts 0 and 4) sit in
  // different groups; group 1's pair (0.948 + 0.943) beats group 0's (0.953 + 0.007).
  const std::vector<float> split = {3.0f, -5, -5, -5, 2.9f, 2.8f, -5, -5};
  EXPECT_EQ(Predicted(IdentityRouterFacts(c, {}), split), (std::set<int32_t>{4, 5}));
}

TEST(RouterPrediction, AddsTheRouterLinearBiasToTheLogits) {
  // gpt-oss's router is a Linear with bias: softmax top-k over logits + bias.
  ModelConfig c;
  c.num_experts = 4;
  c.num_experts_per_tok = 1;
  policy::PolicyFacts f = IdentityRouterFacts(c, {});
  f.grouped_gate.reset();
  const std::vector<float> x = {1.0f, 0.9f, 0.0f, 0.0f};
  EXPECT_EQ(Predicted(f, x), (std::set<int32_t>{0}));
  f.router_logit_bias = [](int) { return std::vector<float>{0, 0.2f, 0, 0}; };  // 0.9 + 0.2.
  EXPECT_EQ(Predicted(f, x), (std::set<int32_t>{1}));
}

TEST(RouterPrediction, PicksWhatTheEngineRoutesUnderTheGroupedGate) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const TopKMethod method : {TopKMethod::kNoauxTc, TopKMethod::kGroupLimitedGreedy}) {
    ModelConfig c = V3Gate(32, 4, 2, 4);
    c.topk_method = method;
    if (method == TopKMethod::kGroupLimitedGreedy) c.scoring_func = ScoringFunc::kSoftmax;
    std::vector<float> bias(32);
    for (float& b : bias) b = 0.3f * normal(rng);
    const policy::PolicyFacts f = IdentityRouterFacts(c, bias);
    for (int t = 0; t < 200; ++t) {
      std::vector<float> x(32);
      for (float& v : x) v = normal(rng);
      Routing r;
      Route(x.data(), 1, c, &r, bias.data());
      const std::set<int32_t> routed(r.ids.begin(), r.ids.end());
      EXPECT_EQ(Predicted(f, x), routed) << "token " << t;
    }
  }
}

// A trace (or checkpoint) whose score-correction tensor does not hold one value per expert
// is refused naming the tensor, not read past its end.
TEST(RouterPrediction, RefusesABiasOfTheWrongSize) {
  ModelConfig c = V3Gate(4, 2, 1, 2);
  c.num_layers = 1;
  c.hidden_size = 4;
  trace::TraceTensors tensors("bad.trace");
  const TensorNames names = TensorNamesFor(c);
  tensors.Add(TensorNames::Layer(0, names.router), 4, 4, std::vector<float>(16, 0.5f));
  tensors.Add(TensorNames::Layer(0, names.router_bias), 1, 5, std::vector<float>(5, 0.0f));
  tiers::CacheGeometry geometry;
  geometry.num_layers = 1;
  geometry.num_experts = 4;
  geometry.neurons = 8;
  geometry.chunk_neurons = 8;
  geometry.capacity_pages = 4;
  const policy::PolicyFacts f = tiers::MakePolicyFacts(c, geometry, 1024, &tensors, 0);
  ASSERT_TRUE(f.grouped_gate.has_value());
  try {
    policy::RouterTable table(f, "nextgate");
    FAIL() << "a 5-value bias for 4 experts was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("e_score_correction_bias has 5 values for 4 experts"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace moex

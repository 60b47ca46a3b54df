// DeepSeek-V2/V3 specifics with hand-computed values: the grouped gate (softmax/sigmoid,
// greedy, group-limited and noaux_tc selection, V2's and V3's scaling), YaRN's frequencies
// and magnitudes, MLA's softmax scale and cache size, and config.json parsing and errors.
// The whole forward pass is checked in engine_reference_test.cc (double precision),
// engine_torch_reference_test.cc (PyTorch) and the generation and offloading suites.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/kv_cache.h"
#include "engine/rope.h"
#include "engine/router.h"
#include "engine/transformer.h"
#include "model/model_config.h"
#include "model/random_model.h"
#include "sim/cost_model.h"

namespace moex {
namespace {

ModelConfig GateConfig(int experts, int top_k) {
  ModelConfig c = RandomModelConfig(Arch::kDeepseekV2, ModelSize::kTiny);
  c.num_experts = experts;
  c.num_experts_per_tok = top_k;
  c.n_group = 1;
  c.topk_group = 1;
  c.topk_method = TopKMethod::kGreedy;
  c.scoring_func = ScoringFunc::kSoftmax;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 1.0f;
  c.scale_normalised_weights = false;
  return c;
}

// Logits whose softmax is p (p sums to 1), and whose sigmoid is p.
std::vector<float> SoftmaxLogits(const std::vector<double>& p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}
std::vector<float> SigmoidLogits(const std::vector<double>& p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v / (1 - v))));
  return out;
}

void ExpectRoute(const ModelConfig& c, const std::vector<float>& logits, const float* bias,
                 const std::vector<int>& ids, const std::vector<double>& weights) {
  Routing r;
  Route(logits.data(), 1, c, &r, bias);
  ASSERT_EQ(r.top_k, static_cast<int>(ids.size()));
  for (size_t k = 0; k < ids.size(); ++k) {
    EXPECT_EQ(r.ids[k], ids[k]) << "rank " << k;
    EXPECT_NEAR(r.weights[k], weights[k], 1e-6) << "rank " << k;
  }
}

TEST(DeepseekGate, V2GreedySoftmaxScalesOnlyWeightsItDoesNotRenormalise) {
  ModelConfig c = GateConfig(4, 2);
  const std::vector<float> logits = SoftmaxLogits({0.1, 0.2, 0.3, 0.4});
  c.routed_scaling_factor = 16.0f;  // DeepSeek-V2's value.
  ExpectRoute(c, logits, nullptr, {3, 2}, {0.4 * 16, 0.3 * 16});
  c.norm_topk_prob = true;  // V2: renormalised weights are not scaled.
  ExpectRoute(c, logits, nullptr, {3, 2}, {4.0 / 7, 3.0 / 7});
  c.scale_normalised_weights = true;  // V3: they are.
  ExpectRoute(c, logits, nullptr, {3, 2}, {4.0 / 7 * 16, 3.0 / 7 * 16});
}

// Eight experts in four groups {0,1} {2,3} {4,5} {6,7}; one group kept.
const std::vector<double> kScores = {0.02, 0.22, 0.17, 0.17, 0.05, 0.19, 0.09, 0.09};

TEST(DeepseekGate, GroupLimitedGreedyKeepsTheGroupsWithTheBestMaximum) {
  ModelConfig c = GateConfig(8, 2);
  ExpectRoute(c, SoftmaxLogits(kScores), nullptr, {1, 5}, {0.22, 0.19});  // Greedy.
  c.topk_method = TopKMethod::kGroupLimitedGreedy;
  c.n_group = 4;
  c.topk_group = 1;
  // Group maxima 0.22, 0.17, 0.19, 0.09: only group 0 stays.
  ExpectRoute(c, SoftmaxLogits(kScores), nullptr, {1, 0}, {0.22, 0.02});
  c.topk_group = 2;  // Groups 0 and 2.
  ExpectRoute(c, SoftmaxLogits(kScores), nullptr, {1, 5}, {0.22, 0.19});
}

TEST(DeepseekGate, NoauxTcRanksGroupsByTopTwoSumWithTheBiasAndWeighsWithout) {
  ModelConfig c = GateConfig(8, 2);
  c.scoring_func = ScoringFunc::kSigmoid;
  c.topk_method = TopKMethod::kNoauxTc;
  c.n_group = 4;
  c.topk_group = 1;
  c.norm_topk_prob = true;
  c.scale_normalised_weights = true;
  c.routed_scaling_factor = 2.5f;
  const std::vector<float> logits = SigmoidLogits(kScores);
  // Top-2 sums 0.24, 0.34, 0.24, 0.18: group 1; a tie goes to the lower index.
  ExpectRoute(c, logits, nullptr, {2, 3}, {0.5 * 2.5, 0.5 * 2.5});
  const std::vector<float> zero(8, 0.0f);
  ExpectRoute(c, logits, zero.data(), {2, 3}, {1.25, 1.25});
  // A bias of 0.2 on group 3 makes its sum 0.58: selected by the bias, weighed by the
  // sigmoid scores alone (0.09 each, renormalised to 0.5).
  const std::vector<float> bias = {0, 0, 0, 0, 0, 0, 0.2f, 0.2f};
  ExpectRoute(c, logits, bias.data(), {6, 7}, {1.25, 1.25});
  c.norm_topk_prob = false;
  ExpectRoute(c, logits, bias.data(), {6, 7}, {0.09 * 2.5, 0.09 * 2.5});
  // probs are the sigmoid scores.
  Routing r;
  Route(logits.data(), 1, c, &r, bias.data());
  for (size_t e = 0; e < kScores.size(); ++e) EXPECT_NEAR(r.probs[e], kScores[e], 1e-6);
}

TEST(DeepseekYarn, FrequenciesAndMagnitudeAsComputedByHand) {
  // head_dim 8, theta 1e4, factor 4 over 32 positions, betas 32 / 1: the correction
  // dimensions are 8 ln(32 / (r 2 pi)) / (2 ln 1e4) = -0.798 (r = 32) and 0.707 (r = 1),
  // so low = 0, high = 1: frequency 0 keeps 1, the others are divided by 4.
  Yarn y;
  y.factor = 4.0f;
  y.original_max_position_embeddings = 32;
  y.mscale = 1.0f;
  y.mscale_all_dim = 0.8f;
  const RopeTable rope(8, 10000.0f, y);
  ASSERT_EQ(rope.half(), 4);
  const double inv[4] = {1.0, 0.025, 0.0025, 0.00025};
  // (0.1 ln 4 + 1) / (0.08 ln 4 + 1).
  const double mscale = (0.1 * std::log(4.0) + 1) / (0.08 * std::log(4.0) + 1);
  float cs[4], sn[4];
  rope.Angles(3, 4, cs, sn);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(cs[i], std::cos(3 * inv[i]) * mscale, 1e-6) << i;
    EXPECT_NEAR(sn[i], std::sin(3 * inv[i]) * mscale, 1e-6) << i;
  }
  EXPECT_NEAR(YarnMscale(40.0, 0.707), 0.1 * 0.707 * std::log(40.0) + 1, 1e-12);
  EXPECT_EQ(YarnMscale(1.0, 0.707), 1.0);
}

TEST(DeepseekMla, SoftmaxScaleIncludesYarnMscaleSquared) {
  ModelConfig c = RandomModelConfig(Arch::kDeepseekV3, ModelSize::kTiny);
  ASSERT_EQ(c.mla->qk_head_dim(), 24);
  const double m = 0.1 * 0.8 * std::log(4.0) + 1;
  EXPECT_NEAR(MlaSoftmaxScale(c), m * m / std::sqrt(24.0), 1e-7);
  c.yarn->mscale_all_dim = 0.0f;  // HF: no mscale_all_dim, no correction.
  EXPECT_NEAR(MlaSoftmaxScale(c), 1 / std::sqrt(24.0), 1e-7);
}

TEST(DeepseekMla, CacheHoldsTheLatentAndKpeOnly) {
  const ModelConfig lite = RandomModelConfig(Arch::kDeepseekV2, ModelSize::kFull);
  // DeepSeek-V2-Lite: 27 layers x (512 + 64) floats, against 27 x 2 x 16 heads x 128 (v)
  // or 192 (k) for the decompressed K and V.
  EXPECT_EQ(KvCache::BytesPerToken(lite), 27u * 576u * 4u);
  const ModelConfig tiny = RandomModelConfig(Arch::kDeepseekV3, ModelSize::kTiny);
  KvCache cache(tiny, 10);
  EXPECT_EQ(cache.row_size(), 32 + 8);
  EXPECT_EQ(cache.bytes(), 3u * 10u * 40u * 4u);
  EXPECT_EQ(cache.values(0), nullptr);
  const ModelConfig olmoe = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  EXPECT_EQ(KvCache::BytesPerToken(olmoe), 3u * 2u * 4u * 16u * 4u);
}

// The simulator's attention cost for MLA: its own projections and one latent row per cached
// position. V2-Lite, weights 2 bytes, cache 4 bytes per value, 1 GB/s, compute unbounded:
// q 2048 x 16 x 192 = 6,291,456; kv_a 2048 x 576 = 1,179,648; kv_b 512 x 16 x 256 =
// 2,097,152; o 16 x 128 x 2048 = 4,194,304; router 2048 x 64 = 131,072; 13,893,632 params
// = 27,787,264 bytes, and 100 positions x 576 x 4 = 230,400 bytes: 28.017664 ms.
TEST(DeepseekMla, SimulatorCostsTheLatentCache) {
  sim::HardwareProfile hw;
  hw.compute_gb_per_s = 1.0;
  hw.compute_tflops = 1e9;
  const sim::CostModel cost(hw, RandomModelConfig(Arch::kDeepseekV2, ModelSize::kFull), 2.0, 4.0);
  EXPECT_NEAR(cost.AttentionMs(1, 100), 28.017664, 1e-9);
}

// DeepSeek-V2-Lite's published config.json (the fields that matter).
nlohmann::json V2LiteJson() {
  return nlohmann::json::parse(R"({
    "model_type": "deepseek_v2", "vocab_size": 102400, "hidden_size": 2048,
    "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
    "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2,
    "n_routed_experts": 64, "routed_scaling_factor": 1.0, "kv_lora_rank": 512,
    "q_lora_rank": null, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "topk_method": "greedy", "n_group": 1, "topk_group": 1, "num_experts_per_tok": 6,
    "moe_layer_freq": 1, "first_k_dense_replace": 1, "norm_topk_prob": false,
    "scoring_func": "softmax", "aux_loss_alpha": 0.001, "seq_aux": true, "hidden_act": "silu",
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "rope_theta": 10000,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                     "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "attention_bias": false, "bos_token_id": 100000, "eos_token_id": 100001,
    "tie_word_embeddings": false})");
}

TEST(DeepseekConfig, ReadsV2LiteAsPublished) {
  const ModelConfig c = ModelConfig::FromHfJson(V2LiteJson());
  EXPECT_EQ(c.arch, Arch::kDeepseekV2);
  ASSERT_TRUE(c.mla && c.yarn);
  EXPECT_EQ(c.mla->q_lora_rank, 0);
  EXPECT_EQ(c.mla->cache_row(), 576);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.shared_expert_intermediate_size, 2 * 1408);
  EXPECT_EQ(c.router, RouterKind::kGroupedTopK);
  EXPECT_EQ(c.topk_method, TopKMethod::kGreedy);
  EXPECT_FALSE(c.scale_normalised_weights);
  EXPECT_FLOAT_EQ(c.yarn->factor, 40.0f);
  EXPECT_FLOAT_EQ(c.yarn->mscale_all_dim, 0.707f);
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  // The random full shape is this config, and a round trip keeps it.
  const ModelConfig full = RandomModelConfig(Arch::kDeepseekV2, ModelSize::kFull);
  EXPECT_EQ(ModelConfig::FromHfJson(full.ToHfJson()).ToHfJson(), full.ToHfJson());
  EXPECT_EQ(full.ToHfJson()["kv_lora_rank"], 512);
  EXPECT_EQ(ModelConfig::FromHfJson(c.ToHfJson()).ToHfJson(), c.ToHfJson());
}

TEST(DeepseekConfig, V3DefaultsAndMtpLayers) {
  nlohmann::json j = V2LiteJson();
  j["model_type"] = "deepseek_v3";
  for (const char* key : {"topk_method", "scoring_func", "n_group", "topk_group", "norm_topk_prob",
                          "routed_scaling_factor", "q_lora_rank"})
    j.erase(key);
  j["num_nextn_predict_layers"] = 1;
  j["n_routed_experts"] = 256;
  j["num_experts_per_tok"] = 8;
  const ModelConfig c = ModelConfig::FromHfJson(j);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(c.topk_method, TopKMethod::kNoauxTc);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 2.5f);
  EXPECT_TRUE(c.scale_normalised_weights);
  EXPECT_EQ(c.mla->q_lora_rank, 1536);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.num_layers, 27);  // MTP layers are not among the layers run.
}

std::string ErrorOf(const nlohmann::json& j) {
  try {
    ModelConfig::FromHfJson(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeepseekConfig, ClearErrors) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* expect;
  };
  const Case cases[] = {
      {"topk_method", "random", "topk_method 'random'"},
      {"scoring_func", "softplus", "scoring_func 'softplus'"},
      {"n_group", 5, "n_group (5)"},
      {"attention_bias", true, "attention_bias"},
      {"kv_lora_rank", 0, "kv_lora_rank"},
      {"qk_rope_head_dim", 0, "qk_rope_head_dim"},
      {"hidden_act", "gelu", "hidden_act"},
  };
  for (const Case& k : cases) {
    nlohmann::json j = V2LiteJson();
    j[k.key] = k.value;
    if (std::string(k.key) == "n_group") j["topk_method"] = "group_limited_greedy";
    const std::string error = ErrorOf(j);
    EXPECT_NE(error.find(k.expect), std::string::npos) << k.key << ": " << error;
  }
  nlohmann::json j = V2LiteJson();
  j["topk_method"] = "group_limited_greedy";
  j["n_group"] = 8;
  j["topk_group"] = 1;  // 8 experts in one group, 6 needed: fine; 7 groups of 8 asked: not.
  EXPECT_EQ(ErrorOf(j), "");
  j["num_experts_per_tok"] = 9;
  EXPECT_NE(ErrorOf(j).find("exceeds the experts"), std::string::npos) << ErrorOf(j);
  j = V2LiteJson();
  j["rope_scaling"].erase("factor");
  EXPECT_NE(ErrorOf(j).find("factor"), std::string::npos) << ErrorOf(j);
  j = V2LiteJson();
  j["rope_scaling"]["original_max_position_embeddings"] = 0;
  EXPECT_NE(ErrorOf(j).find("original_max_position_embeddings"), std::string::npos);
  nlohmann::json olmoe = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny).ToHfJson();
  olmoe["rope_scaling"] = V2LiteJson()["rope_scaling"];
  EXPECT_NE(ErrorOf(olmoe).find("'yarn' is supported for deepseek_v2, deepseek_v3 and gpt_oss only"),
            std::string::npos)
      << ErrorOf(olmoe);
}

}  // namespace
}  // namespace moex

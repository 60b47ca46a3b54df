// GLM-4.5 / 4.5-Air / 4.7 (glm4_moe) specifics: config.json parsing (the published configs,
// HF's defaults, transformers 5's rope_parameters, errors), partial RoPE's frequencies by
// hand and the random shapes. The whole forward pass is checked in engine_reference_test.cc
// (double precision), engine_torch_reference_test.cc (PyTorch) and the generation,
// offloading and simulator suites; llama.cpp's glm4moe GGUF in glm4_moe_gguf_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/rope.h"
#include "model/model_config.h"
#include "model/random_model.h"

namespace moex {
namespace {

// zai-org/GLM-4.5-Air's config.json as published.
nlohmann::json AirJson() {
  return nlohmann::json::parse(R"({
    "architectures": ["Glm4MoeForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
    "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338], "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "partial_rotary_factor": 0.5,
    "initializer_range": 0.02, "intermediate_size": 10944, "max_position_embeddings": 131072,
    "model_type": "glm4_moe", "moe_intermediate_size": 1408, "norm_topk_prob": true,
    "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 128,
    "n_shared_experts": 1, "routed_scaling_factor": 1.0, "num_experts_per_tok": 8,
    "first_k_dense_replace": 1, "num_hidden_layers": 46, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 1000000,
    "num_nextn_predict_layers": 1, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.54.0", "use_cache": true, "use_qk_norm": false,
    "vocab_size": 151552})");
}

// zai-org/GLM-4.7 (GLM-4.5's shape, a longer context).
nlohmann::json Glm47Json() {
  nlohmann::json j = AirJson();
  j["hidden_size"] = 5120;
  j["intermediate_size"] = 12288;
  j["max_position_embeddings"] = 202752;
  j["moe_intermediate_size"] = 1536;
  j["n_routed_experts"] = 160;
  j["routed_scaling_factor"] = 2.5;
  j["first_k_dense_replace"] = 3;
  j["num_hidden_layers"] = 92;
  j["use_qk_norm"] = true;
  return j;
}

std::string ErrorOf(const nlohmann::json& j) {
  try {
    ModelConfig::FromHfJson(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Glm4MoeConfig, ReadsAirAsPublished) {
  const ModelConfig c = ModelConfig::FromHfJson(AirJson());
  EXPECT_EQ(c.arch, Arch::kGlm4Moe);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.RotaryDim(), 64);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.attention_out_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.router, RouterKind::kGroupedTopK);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(c.topk_method, TopKMethod::kNoauxTc);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_TRUE(c.scale_normalised_weights);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 1.0f);
  EXPECT_EQ(c.shared_expert_intermediate_size, 1408);
  EXPECT_FALSE(c.shared_expert_gate);
  EXPECT_EQ(c.intermediate_size, 10944);
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_TRUE(c.IsMoeLayer(45));
  EXPECT_EQ(c.num_layers, 46);  // The MTP layer (model.layers.46) is not run.
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{151329, 151336, 151338}));
  // The round trip keeps it, and the random full shape is this config.
  EXPECT_EQ(ModelConfig::FromHfJson(c.ToHfJson()).ToHfJson(), c.ToHfJson());
  const ModelConfig full = RandomModelConfig(Arch::kGlm4Moe, ModelSize::kFull);
  EXPECT_EQ(full.ToHfJson(), c.ToHfJson());
  EXPECT_EQ(full.ToHfJson()["partial_rotary_factor"], 0.5);
  EXPECT_FALSE(full.ToHfJson().contains("moe_layer_freq"));
}

TEST(Glm4MoeConfig, ReadsGlm47WithQkNormAndScale) {
  const ModelConfig c = ModelConfig::FromHfJson(Glm47Json());
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.qk_norm_per_head);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 2.5f);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  EXPECT_FALSE(c.IsMoeLayer(2));
  EXPECT_TRUE(c.IsMoeLayer(3));
  EXPECT_EQ(c.max_position_embeddings, 202752);
  EXPECT_EQ(c.shared_expert_intermediate_size, 1536);
  EXPECT_EQ(ModelConfig::FromHfJson(c.ToHfJson()).ToHfJson(), c.ToHfJson());
}

// Keys left out take Glm4MoeConfig's defaults; head_dim falls back to hidden / heads.
TEST(Glm4MoeConfig, DefaultsOfTheHfConfigClass) {
  nlohmann::json j = {{"model_type", "glm4_moe"}, {"vocab_size", 1000},
                      {"hidden_size", 64},        {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"n_routed_experts", 4},
                      {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32},
                      {"intermediate_size", 128}};
  const ModelConfig c = ModelConfig::FromHfJson(j);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_dim, 8);  // partial_rotary_factor 0.5.
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.shared_expert_intermediate_size, 32);  // n_shared_experts 1.
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 1.0f);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  // moe_layer_freq is not a Glm4MoeConfig key: every layer past the dense ones is MoE.
  j["moe_layer_freq"] = 2;
  EXPECT_TRUE(ModelConfig::FromHfJson(j).IsMoeLayer(1));
}

// transformers 5 writes rope_parameters beside (or instead of) the top-level keys.
TEST(Glm4MoeConfig, RopeParametersOfTransformers5) {
  nlohmann::json j = AirJson();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000},
                          {"partial_rotary_factor", 0.5}};
  EXPECT_EQ(ErrorOf(j), "");
  j.erase("rope_theta");
  j.erase("partial_rotary_factor");
  j["rope_parameters"]["partial_rotary_factor"] = 0.25;
  const ModelConfig c = ModelConfig::FromHfJson(j);
  EXPECT_EQ(c.rope_dim, 32);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  j["partial_rotary_factor"] = 0.5;
  EXPECT_NE(ErrorOf(j).find("partial_rotary_factor is 0.5 but rope_parameters says 0.25"),
            std::string::npos)
      << ErrorOf(j);
  j = AirJson();
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(ErrorOf(j).find("rope_parameters.rope_type 'yarn'"), std::string::npos) << ErrorOf(j);
}

TEST(Glm4MoeConfig, ClearErrors) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* expect;
  };
  const Case cases[] = {
      {"partial_rotary_factor", 0.0, "partial_rotary_factor must be in (0, 1]"},
      {"partial_rotary_factor", 1.5, "partial_rotary_factor must be in (0, 1]"},
      {"partial_rotary_factor", 0.001, "fewer than 2 rotary dimensions"},
      {"partial_rotary_factor", 0.3046875, "must be even"},  // int(128 * 0.3046875) = 39.
      {"hidden_act", "gelu", "glm4_moe hidden_act"},
      {"n_shared_experts", -1, "n_shared_experts"},
      {"n_group", 3, "n_group (3)"},
      {"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}}, "'yarn' is supported for deepseek"},
  };
  for (const Case& k : cases) {
    nlohmann::json j = AirJson();
    j[k.key] = k.value;
    const std::string error = ErrorOf(j);
    EXPECT_NE(error.find(k.expect), std::string::npos) << k.key << ": " << error;
  }
  nlohmann::json j = AirJson();
  j.erase("n_routed_experts");
  EXPECT_NE(ErrorOf(j).find("'n_routed_experts'"), std::string::npos) << ErrorOf(j);
  // Partial rotary belongs to glm4_moe only.
  ModelConfig olmoe = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  olmoe.rope_dim = 8;
  EXPECT_THROW(olmoe.Validate(), Error);
}

// HF's Glm4MoeRotaryEmbedding: inv_freq_i = theta^(-2i / rot) over rot = head_dim / 2, so
// the table has rot / 2 frequencies and the lowest is theta^(-(rot - 2) / rot).
TEST(Glm4MoeRope, FrequenciesOverTheRotatedPartByHand) {
  ModelConfig c = RandomModelConfig(Arch::kGlm4Moe, ModelSize::kTiny);
  ASSERT_EQ(c.head_dim, 16);
  ASSERT_EQ(c.RotaryDim(), 8);
  c.rope_theta = 10000.0f;
  const RopeTable rope(c);
  ASSERT_EQ(rope.half(), 4);
  float cos[4], sin[4];
  rope.Angles(3, 4, cos, sin);
  // Frequencies 1, 0.1, 0.01, 0.001 (10000^(-i/4)); angle = 3 * frequency.
  const double freq[4] = {1.0, 0.1, 0.01, 0.001};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(cos[i], std::cos(3 * freq[i]), 1e-6) << i;
    EXPECT_NEAR(sin[i], std::sin(3 * freq[i]), 1e-6) << i;
  }
}

TEST(Glm4MoeRandomModel, TinyAndSmallKeepTheTopology) {
  for (ModelSize size : {ModelSize::kTiny, ModelSize::kSmall}) {
    const ModelConfig c = RandomModelConfig(Arch::kGlm4Moe, size);
    EXPECT_NO_THROW(c.Validate());
    EXPECT_EQ(c.RotaryDim() * 2, c.head_dim);
    EXPECT_TRUE(c.attention_bias);
    EXPECT_EQ(c.first_k_dense_replace, 1);
    EXPECT_EQ(c.shared_expert_intermediate_size, c.moe_intermediate_size);
    EXPECT_EQ(c.topk_method, TopKMethod::kNoauxTc);
    EXPECT_EQ(c.num_nextn_predict_layers, 0);  // No MTP tensors are written.
    EXPECT_EQ(ModelConfig::FromHfJson(c.ToHfJson()).ToHfJson(), c.ToHfJson());
  }
}

}  // namespace
}  // namespace moex

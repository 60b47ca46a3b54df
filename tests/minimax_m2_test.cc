// MiniMax-M2 / M2.1 (minimax_m2) specifics: config.json parsing (the published config,
// errors), the random shapes, and llama.cpp's "minimax-m2" GGUF (its keys and names, the
// checkpoint's logits). The whole forward pass is checked in engine_reference_test.cc
// (double precision) and the generation, offloading and simulator suites; against
// llama.cpp's own logits in llamacpp_archs_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/moe_executor.h"
#include "io/gguf_writer.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/random_model.h"
#include "support/engine_runs.h"
#include "support/error_of.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

// MiniMaxAI/MiniMax-M2's config.json (its text model's keys).
nlohmann::json M2Json() {
  return nlohmann::json::parse(R"({
    "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2",
    "vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 1536,
    "num_hidden_layers": 62, "num_attention_heads": 48, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 196608, "num_local_experts": 256,
    "num_experts_per_tok": 8, "scoring_func": "sigmoid", "use_routing_bias": true,
    "use_mtp": true, "num_mtp_modules": 3, "mtp_transformer_layers": 1, "use_qk_norm": true,
    "qk_norm_type": "per_layer", "rotary_dim": 64, "rope_theta": 5000000, "rms_norm_eps": 1e-06,
    "hidden_act": "silu", "tie_word_embeddings": false, "attn_window_size": null,
    "router_jitter_noise": 0.0, "torch_dtype": "bfloat16"})");
}

std::string ErrorOf(const nlohmann::json& j) {
  return testing::ErrorOf([&] { ModelConfig::FromHfJson(j); });
}

TEST(MiniMaxM2Config, ReadsM2AsPublished) {
  const ModelConfig c = ModelConfig::FromHfJson(M2Json());
  EXPECT_EQ(c.arch, Arch::kMiniMaxM2);
  EXPECT_EQ(c.num_layers, 62);
  EXPECT_EQ(c.num_heads, 48);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.RotaryDim(), 64);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 1536);
  EXPECT_EQ(c.shared_expert_intermediate_size, 0);
  EXPECT_EQ(c.first_k_dense_replace, 0);
  EXPECT_EQ(c.router, RouterKind::kGroupedTopK);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(c.topk_method, TopKMethod::kNoauxTc);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling_factor, 1.0f);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qk_norm_per_head);  // One RMSNorm over all heads of q (and of k).
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_theta, 5e6f);
  // The random full shape is the published one.
  const ModelConfig full = RandomModelConfig(Arch::kMiniMaxM2, ModelSize::kFull);
  for (const char* key :
       {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "rotary_dim", "num_local_experts", "num_experts_per_tok", "intermediate_size",
        "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps"})
    EXPECT_EQ(full.ToHfJson()[key], c.ToHfJson()[key]) << key;
  EXPECT_EQ(ModelConfig::FromHfJson(c.ToHfJson()).ToHfJson(), c.ToHfJson());
}

TEST(MiniMaxM2Config, FullRotaryWithoutRotaryDim) {
  nlohmann::json j = M2Json();
  j.erase("rotary_dim");
  EXPECT_EQ(ModelConfig::FromHfJson(j).RotaryDim(), 128);
}

TEST(MiniMaxM2Config, ClearErrors) {
  const std::vector<std::pair<std::pair<const char*, nlohmann::json>, const char*>> cases = {
      {{"scoring_func", "softmax"}, "scoring_func 'softmax' is not supported"},
      {{"use_routing_bias", false}, "without use_routing_bias"},
      {{"qk_norm_type", "per_head"}, "qk_norm_type 'per_head'"},
      {{"attn_window_size", 4096}, "attn_window_size"},
      {{"rotary_dim", 256}, "rotary_dim (256) must be in 2..head_dim (128)"},
      {{"hidden_act", "gelu"}, "hidden_act must be \"silu\""},
      {{"num_local_experts", nullptr}, "missing integer field 'num_local_experts'"},
  };
  for (const auto& [edit, message] : cases) {
    nlohmann::json j = M2Json();
    j[edit.first] = edit.second;
    const std::string error = ErrorOf(j);
    EXPECT_NE(error.find(message), std::string::npos) << edit.first << ": " << error;
  }
  nlohmann::json grouped = M2Json();
  grouped["use_grouped_topk"] = true;
  grouped["num_expert_group"] = 4;
  EXPECT_NE(ErrorOf(grouped).find("several groups"), std::string::npos) << ErrorOf(grouped);
}

TEST(MiniMaxM2RandomModel, TinyAndSmallKeepTheTopology) {
  for (ModelSize size : {ModelSize::kTiny, ModelSize::kSmall}) {
    const ModelConfig c = RandomModelConfig(Arch::kMiniMaxM2, size);
    EXPECT_NO_THROW(c.Validate());
    EXPECT_EQ(c.RotaryDim() * 2, c.head_dim);
    EXPECT_LT(c.num_kv_heads, c.num_heads);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_FALSE(c.qk_norm_per_head);
    EXPECT_EQ(c.topk_method, TopKMethod::kNoauxTc);
    EXPECT_EQ(ModelConfig::FromHfJson(c.ToHfJson()).ToHfJson(), c.ToHfJson());
  }
}

std::vector<float> Logits(const Model& model) {
  ResidentMoeExecutor executor(model);
  return testing::PrefillLogits(model, executor, {1, 17, 300, 42, 42, 511, 0, 99, 256, 7});
}

// llama.cpp's names and keys: exp_probs_b, whole-width attn_q_norm / attn_k_norm, the
// rotary part in rope.dimension_count, the sigmoid gate; the checkpoint's logits.
TEST(MiniMaxM2Gguf, LlamaCppKeysAndTensorsWithTheCheckpointsLogits) {
  testing::TempDir temp;
  auto hf = LoadModel(testing::TinyModelPath(Arch::kMiniMaxM2));
  const ModelConfig& c = hf->config;
  const std::string path = temp / "m.gguf";
  WriteGgufModel(c, *hf->weights, nullptr, path);

  const GgufFile f(path);
  EXPECT_EQ(f.GetString("general.architecture"), "minimax-m2");
  EXPECT_EQ(f.GetInt("minimax-m2.rope.dimension_count"), c.head_dim / 2);
  EXPECT_EQ(f.GetInt("minimax-m2.attention.key_length"), c.head_dim);
  EXPECT_EQ(f.GetInt("minimax-m2.expert_feed_forward_length"), c.moe_intermediate_size);
  EXPECT_EQ(f.GetInt("minimax-m2.expert_gating_func"), 2);
  EXPECT_EQ(f.Find("minimax-m2.expert_weights_norm"), nullptr);  // llama.cpp fixes it.
  for (const char* name :
       {"blk.0.ffn_gate_inp.weight", "blk.0.exp_probs_b.bias", "blk.0.ffn_gate_exps.weight",
        "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight", "output.weight"})
    EXPECT_NE(f.FindTensorInfo(name), nullptr) << name;
  const GgufTensorInfo* q_norm = f.FindTensorInfo("blk.0.attn_q_norm.weight");
  const GgufTensorInfo* k_norm = f.FindTensorInfo("blk.0.attn_k_norm.weight");
  ASSERT_NE(q_norm, nullptr);
  ASSERT_NE(k_norm, nullptr);
  EXPECT_EQ(q_norm->ne[0], int64_t{c.num_heads} * c.head_dim);
  EXPECT_EQ(k_norm->ne[0], int64_t{c.num_kv_heads} * c.head_dim);

  auto gguf = LoadModel(path);
  EXPECT_EQ(gguf->config.ToHfJson(), c.ToHfJson());
  const std::vector<float> a = Logits(*hf), b = Logits(*gguf);
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    max_diff = std::max(max_diff, std::abs(double{a[i]} - b[i]));
  EXPECT_LT(max_diff, 1e-5);

  // Another gating function is refused by name.
  GgufWriter w;
  for (const auto& [key, value] : f.metadata()) w.Set(key, value);
  w.Set("minimax-m2.expert_gating_func", GgufValue::U32(1));
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    const TensorView* t = f.FindTensor(info.name);
    w.AddTensor(info.name, t->dtype, t->shape, t->data);
  }
  w.Write(temp / "softmax.gguf");
  try {
    OpenGgufModel(temp / "softmax.gguf");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("minimax-m2.expert_gating_func 1"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace moex

// Qwen3.5-MoE (qwen3_5_moe) specifics: config.json with its text_config and MRoPE keys (the
// published config, errors), the random shapes, the HF checkpoint's names (the text model
// under model.language_model., fused experts, four DeltaNet projections), and llama.cpp's
// qwen35moe file as moex writes it (tiled value heads, ssm_beta / ssm_alpha, the MRoPE
// sections) against the checkpoint's logits and the double-precision reference. The engine
// paths Qwen3.5 shares with Qwen3-Next are tested in qwen3_next_test.cc; the short-prompt
// logits of every dtype in engine_reference_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/kv_cache.h"
#include "engine/moe_executor.h"
#include "io/gguf_file.h"
#include "io/safetensors.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/random_model.h"
#include "support/engine_runs.h"
#include "support/error_of.h"
#include "support/reference_model.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

// Qwen/Qwen3.5-35B-A3B's config.json (text_config; the vision_config is not read).
nlohmann::json PublishedJson() {
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < 40; ++l) types.push_back((l + 1) % 4 ? "linear_attention" : "full_attention");
  nlohmann::json text = nlohmann::json::parse(R"({
    "model_type": "qwen3_5_moe_text", "attention_bias": false, "attention_dropout": 0.0,
    "attn_output_gate": true, "bos_token_id": 248044, "dtype": "bfloat16",
    "eos_token_id": 248044, "full_attention_interval": 4, "head_dim": 256,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "moe_intermediate_size": 512,
    "mtp_num_hidden_layers": 1, "num_attention_heads": 16, "num_experts": 256,
    "num_experts_per_tok": 8, "num_hidden_layers": 40, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 512, "use_cache": true, "vocab_size": 248320,
    "rope_parameters": {"mrope_interleaved": true, "mrope_section": [11, 11, 10],
                        "rope_type": "default", "rope_theta": 10000000,
                        "partial_rotary_factor": 0.25}})");
  text["layer_types"] = types;
  nlohmann::json j = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
                      {"model_type", "qwen3_5_moe"},
                      {"image_token_id", 248056},
                      {"tie_word_embeddings", false},
                      {"text_config", text},
                      {"vision_config", {{"depth", 27}, {"hidden_size", 1152}}}};
  return j;
}

TEST(Qwen35MoeConfig, ReadsThePublishedTextConfig) {
  const ModelConfig c = ModelConfig::FromHfJson(PublishedJson());
  EXPECT_EQ(c.arch, Arch::kQwen35Moe);
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.num_layers, 40);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.RotaryDim(), 64);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e7f);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_TRUE(c.attention_output_gate && c.shared_expert_gate);
  EXPECT_EQ(c.norm_weight_offset, 1.0f);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{248044});
  ASSERT_TRUE(c.delta_net.has_value());
  EXPECT_EQ(c.delta_net->num_v_heads, 32);
  EXPECT_FALSE(c.delta_net->tiled_v_heads);  // HF's grouped order.
  EXPECT_FALSE(c.IsLinearLayer(3));
  EXPECT_TRUE(c.IsLinearLayer(38));
  // The published shape is the random model's full shape, and writes back nested.
  const ModelConfig full = RandomModelConfig(Arch::kQwen35Moe, ModelSize::kFull);
  EXPECT_EQ(full.ToHfJson(), c.ToHfJson());
  const nlohmann::json written = c.ToHfJson();
  EXPECT_EQ(written["model_type"], "qwen3_5_moe");
  EXPECT_EQ(written["text_config"]["hidden_size"], 2048);
  EXPECT_EQ(written["text_config"]["rope_parameters"]["mrope_section"],
            nlohmann::json({11, 11, 10}));
  EXPECT_EQ(ModelConfig::FromHfJson(written).ToHfJson(), written);
}

TEST(Qwen35MoeConfig, RefusesWhatItDoesNotCompute) {
  const std::vector<std::pair<std::pair<const char*, nlohmann::json>, const char*>> cases = {
      {{"attention_bias", true}, "attention_bias true"},
      {{"hidden_act", "gelu"}, "gelu"},
      {{"linear_num_value_heads", 24}, "multiple of linear_num_key_heads"},
  };
  for (const auto& [edit, message] : cases) {
    nlohmann::json j = PublishedJson();
    j["text_config"][edit.first] = edit.second;
    const std::string error = testing::ErrorOf([&] { ModelConfig::FromHfJson(j); });
    EXPECT_NE(error.find(message), std::string::npos) << edit.first << ": " << error;
  }
  nlohmann::json yarn = PublishedJson();
  yarn["text_config"]["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_NE(testing::ErrorOf([&] { ModelConfig::FromHfJson(yarn); }).find("'yarn'"),
            std::string::npos);
  nlohmann::json wide = PublishedJson();
  wide["text_config"]["rope_parameters"]["mrope_section"] = {16, 16, 16};
  EXPECT_NE(testing::ErrorOf([&] { ModelConfig::FromHfJson(wide); }).find("sums to 48"),
            std::string::npos);
}

// At the full shape: 10 attention layers of rows, 30 DeltaNet layers of state
// (docs/architectures.md: 40 KiB per token, 123.0 MiB per sequence).
TEST(Qwen35MoeKvCache, RowsForTheTenAttentionLayersStateForTheThirtyOthers) {
  const ModelConfig full = RandomModelConfig(Arch::kQwen35Moe, ModelSize::kFull);
  EXPECT_EQ(KvCache::BytesPerToken(full), 10u * 2 * 256 * 2 * 4);
  EXPECT_EQ(KvCache::StateBytes(full), 30u * (3 * 8192 + 32 * (128 * 128 + 64 * 257)) * 4);
  EXPECT_EQ(KvCache::StateBytes(full), 129024000u);
}

TEST(Qwen35MoeRandomModel, TinyAndSmallKeepTheTopology) {
  for (ModelSize size : {ModelSize::kTiny, ModelSize::kSmall}) {
    const ModelConfig c = RandomModelConfig(Arch::kQwen35Moe, size);
    EXPECT_NO_THROW(c.Validate());
    EXPECT_EQ(c.arch, Arch::kQwen35Moe);
    ASSERT_TRUE(c.delta_net.has_value());
    EXPECT_EQ(c.delta_net->num_v_heads, 2 * c.delta_net->num_k_heads);
    EXPECT_FALSE(c.IsLinearLayer(3));
    EXPECT_EQ(ModelConfig::FromHfJson(c.ToHfJson()).ToHfJson(), c.ToHfJson());
  }
}

// The random checkpoint is stored as HF publishes Qwen3.5: text weights under
// model.language_model., experts fused, the four DeltaNet projections; moex reads it under
// the shared names, each expert a slice of the fused tensors.
TEST(Qwen35MoeHf, ReadsTheLanguageModelsNamesAndFusedExperts) {
  const std::string dir = testing::TinyModelPath(Arch::kQwen35Moe, DType::kF32);
  const SafetensorsFile file(dir + "/model.safetensors");
  EXPECT_NE(file.Find("model.language_model.embed_tokens.weight"), nullptr);
  EXPECT_NE(file.Find("model.language_model.layers.0.linear_attn.in_proj_b.weight"), nullptr);
  EXPECT_EQ(file.Find("model.embed_tokens.weight"), nullptr);
  const TensorView* fused = file.Find("model.language_model.layers.0.mlp.experts.gate_up_proj");
  ASSERT_NE(fused, nullptr);
  auto model = LoadModel(dir);
  const ModelConfig& c = model->config;
  const int64_t F = c.moe_intermediate_size, d = c.hidden_size;
  ASSERT_EQ(fused->shape, (std::vector<int64_t>{c.num_experts, 2 * F, d}));
  const std::vector<float> all = TensorToF32(*fused);
  // Expert 1's up row 2 is fused row F + 2 of expert 1.
  const std::vector<float> up =
      TensorToF32(model->weights->Get(model->names.Expert(0, 1, ExpertMatrix::kUp)));
  ASSERT_EQ(up.size(), static_cast<size_t>(F * d));
  EXPECT_EQ(up[static_cast<size_t>(2 * d + 5)], all[static_cast<size_t>((2 * F + F + 2) * d + 5)]);
  EXPECT_NE(model->layers[0].gdn_b, nullptr);
  EXPECT_EQ(model->layers[0].gdn_ba, nullptr);
  EXPECT_TRUE(model->unused_tensors.empty());
  // The engine against the double-precision reference, over two DeltaNet chunks.
  std::vector<int32_t> ids;
  for (int i = 0; i < 90; ++i) ids.push_back((i * 37 + 11) % c.vocab_size);
  ResidentMoeExecutor executor(*model);
  const testing::LogitGap gap =
      testing::CompareLogits(testing::PrefillLogits(*model, executor, ids),
                             testing::ReferenceLogits(c, *model->weights, ids));
  EXPECT_LT(gap.max_err, 2e-4 * gap.scale) << "scale " << gap.scale;
}

// llama.cpp's qwen35moe as its converter writes it: attn_qkv / attn_gate / ssm_beta /
// ssm_alpha, value heads tiled, the MRoPE sections; the file computes the checkpoint's logits.
TEST(Qwen35MoeGguf, LlamaCppTensorsTiledWithTheCheckpointsLogits) {
  testing::TempDir temp;
  auto hf = LoadModel(testing::TinyModelPath(Arch::kQwen35Moe, DType::kF32));
  const ModelConfig& c = hf->config;
  const GatedDeltaNet& g = *c.delta_net;
  const std::string path = temp / "m.gguf";
  WriteGgufModel(c, *hf->weights, nullptr, path);

  const GgufFile f(path);
  EXPECT_EQ(f.GetString("general.architecture"), "qwen35moe");
  const std::vector<int64_t> sections = f.Get("qwen35moe.rope.dimension_sections").AsIntArray();
  ASSERT_EQ(sections.size(), 4u);
  EXPECT_EQ(sections[0] + sections[1] + sections[2] + sections[3], c.RotaryDim() / 2);
  const int64_t d = c.hidden_size, nk = g.num_k_heads, r = g.num_v_heads / nk;
  ASSERT_GT(r, 1);
  EXPECT_EQ(f.FindTensorInfo("blk.0.ssm_beta.weight")->ne,
            (std::vector<int64_t>{d, g.num_v_heads}));
  EXPECT_EQ(f.FindTensorInfo("blk.0.ssm_alpha.weight")->ne,
            (std::vector<int64_t>{d, g.num_v_heads}));
  EXPECT_EQ(f.FindTensorInfo("blk.0.ssm_ba.weight"), nullptr);
  // Tiled: GGUF v head u = j * nk + k is HF's k * r + j (u = 1: HF head r).
  const std::vector<float> beta = TensorToF32(*f.FindTensor("blk.0.ssm_beta.weight"));
  const std::vector<float> hf_b =
      TensorToF32(hf->weights->Get("model.layers.0.linear_attn.in_proj_b.weight"));
  EXPECT_EQ(beta[static_cast<size_t>(1 * d + 3)], hf_b[static_cast<size_t>(r * d + 3)]);
  const std::vector<float> a = TensorToF32(*f.FindTensor("blk.0.ssm_a"));
  const std::vector<float> a_log =
      TensorToF32(hf->weights->Get("model.layers.0.linear_attn.A_log"));
  EXPECT_FLOAT_EQ(a[1], -std::exp(a_log[static_cast<size_t>(r)]));
  const std::vector<float> out = TensorToF32(*f.FindTensor("blk.0.ssm_out.weight"));
  const std::vector<float> hf_out =
      TensorToF32(hf->weights->Get("model.layers.0.linear_attn.out_proj.weight"));
  const int64_t dv = g.v_head_dim, cols = g.value_dim();
  EXPECT_EQ(out[static_cast<size_t>(2 * cols + 1 * dv + 4)],
            hf_out[static_cast<size_t>(2 * cols + r * dv + 4)]);

  auto gguf = LoadModel(path);
  EXPECT_TRUE(gguf->config.delta_net->tiled_v_heads);
  EXPECT_EQ(gguf->config.ToHfJson(), c.ToHfJson());
  std::vector<int32_t> ids;
  for (int i = 0; i < 70; ++i) ids.push_back((i * 37 + 11) % c.vocab_size);
  ResidentMoeExecutor ea(*hf), eb(*gguf);
  const std::vector<float> want = testing::PrefillLogits(*hf, ea, ids);
  const std::vector<float> got = testing::PrefillLogits(*gguf, eb, ids);
  ASSERT_EQ(want.size(), got.size());
  double max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i)
    max_diff = std::max(max_diff, std::abs(double{want[i]} - got[i]));
  EXPECT_LT(max_diff, 1e-3);
  const testing::LogitGap gap =
      testing::CompareLogits(got, testing::ReferenceLogits(gguf->config, *gguf->weights, ids));
  EXPECT_LT(gap.max_err, 2e-4 * gap.scale);
}

}  // namespace
}  // namespace moex

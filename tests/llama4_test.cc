// Llama 4 (llama4) specifics: config.json parsing (Scout's config nested in text_config, the
// defaults, errors), Llama 3's RoPE factors by hand, chunked attention in the kernel by hand,
// the random shapes, the engine against the double-precision reference with a chunk and a
// temperature floor small enough to cross them (in one pass, in passes and token by token),
// the router's weight on the experts' input, and the GGUF keys, tensors and logits. llama.cpp's
// own toy file is in llamacpp_archs_test.cc; the short-prompt logits of every dtype in
// engine_reference_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/kv_cache.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "io/gguf_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "kernels/ops.h"
#include "model/arch/family.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/random_model.h"
#include "support/engine_runs.h"
#include "support/error_of.h"
#include "support/reference_model.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"
#include "text/tokenizer.h"

namespace moex {
namespace {

// A Llama4ForConditionalGeneration config.json shaped as Llama-4-Scout-17B-16E's: the
// language model's keys in text_config (vision_config abridged: never read).
nlohmann::json ScoutJson() {
  nlohmann::json no_rope = nlohmann::json::array();
  for (int i = 0; i < 48; ++i) no_rope.push_back((i + 1) % 4 != 0 ? 1 : 0);
  nlohmann::json moe_layers = nlohmann::json::array();
  for (int i = 0; i < 48; ++i) moe_layers.push_back(i);
  nlohmann::json text = nlohmann::json::parse(R"({
    "attention_bias": false, "attention_chunk_size": 8192, "attention_dropout": 0.0,
    "attn_scale": 0.1, "attn_temperature_tuning": true, "bos_token_id": 200000,
    "eos_token_id": [200001, 200007, 200008], "floor_scale": 8192, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02,
    "interleave_moe_layer_step": 1, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "max_position_embeddings": 10485760, "model_type": "llama4_text",
    "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48,
    "num_key_value_heads": 8, "num_local_experts": 16, "output_router_logits": false,
    "pad_token_id": 200018, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
    "use_qk_norm": true, "vocab_size": 202048})");
  text["no_rope_layers"] = no_rope;
  text["moe_layers"] = moe_layers;
  nlohmann::json j;
  j["architectures"] = {"Llama4ForConditionalGeneration"};
  j["model_type"] = "llama4";
  j["text_config"] = text;
  j["vision_config"] = {{"hidden_size", 1408}, {"model_type", "llama4_vision_model"}};
  j["tie_word_embeddings"] = false;
  return j;
}

std::string ErrorOf(const nlohmann::json& j) {
  return testing::ErrorOf([&] { ModelConfig::FromHfJson(j); });
}

std::vector<int32_t> Prompt(int64_t n) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % 512));
  return ids;
}

TEST(Llama4Config, ReadsScoutFromItsTextConfig) {
  const ModelConfig c = ModelConfig::FromHfJson(ScoutJson());
  EXPECT_EQ(c.arch, Arch::kLlama4);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.num_layers, 48);
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(c.num_experts_per_tok, 1);
  EXPECT_EQ(c.moe_intermediate_size, 8192);
  EXPECT_EQ(c.shared_expert_intermediate_size, 8192);
  EXPECT_EQ(c.intermediate_size, 16384);
  EXPECT_TRUE(c.expert_weight_on_input);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSigmoid);
  for (int l = 0; l < 48; ++l) {
    EXPECT_TRUE(c.IsMoeLayer(l)) << l;
    EXPECT_EQ(c.IsNopeLayer(l), l % 4 == 3) << l;
    EXPECT_EQ(c.AttentionChunk(l), l % 4 == 3 ? 0 : 8192) << l;
  }
  EXPECT_TRUE(c.qk_norm_unweighted);
  EXPECT_EQ(c.attn_temperature_floor, 8192);
  EXPECT_FLOAT_EQ(c.attn_temperature_scale, 0.1f);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{200001, 200007, 200008}));
  // llama3 scaling with low_freq_factor = high_freq_factor: 1 or 16, nothing between.
  ASSERT_TRUE(c.longrope.has_value());
  EXPECT_EQ(c.longrope->long_factor.front(), 1.0f);
  EXPECT_EQ(c.longrope->long_factor.back(), 16.0f);
  for (const float f : c.longrope->long_factor) EXPECT_TRUE(f == 1.0f || f == 16.0f);
  // The published shape is `random-model --size full`'s.
  EXPECT_EQ(RandomModelConfig(Arch::kLlama4, ModelSize::kFull).longrope->long_factor,
            c.longrope->long_factor);
}

// Maverick's interleave (MoE on odd layers), defaults for what the config leaves out.
TEST(Llama4Config, InterleaveAndDefaults) {
  nlohmann::json text = ScoutJson()["text_config"];
  text["interleave_moe_layer_step"] = 2;
  text.erase("moe_layers");
  text.erase("no_rope_layers");
  text.erase("rope_scaling");
  text["use_qk_norm"] = false;
  const ModelConfig c = ModelConfig::FromHfJson(text);
  for (int l = 0; l < 48; ++l) {
    EXPECT_EQ(c.IsMoeLayer(l), l % 2 == 1) << l;
    EXPECT_EQ(c.IsNopeLayer(l), l % 4 == 3) << l;
  }
  EXPECT_FALSE(c.qk_norm_unweighted);
  EXPECT_FALSE(c.longrope.has_value());
  text["attn_temperature_tuning"] = false;
  EXPECT_EQ(ModelConfig::FromHfJson(text).attn_temperature_floor, 0);
  text["attn_temperature_tuning"] = 4;  // Some published configs wrote a number.
  EXPECT_EQ(ModelConfig::FromHfJson(text).attn_temperature_floor, 8192);
}

TEST(Llama4Config, RefusesWhatItDoesNotCompute) {
  nlohmann::json text = ScoutJson()["text_config"];
  nlohmann::json j = text;
  j["moe_layers"] = {0, 5};
  EXPECT_NE(ErrorOf(j).find("moe_layers"), std::string::npos) << ErrorOf(j);
  j = text;
  j["hidden_act"] = "gelu";
  EXPECT_NE(ErrorOf(j).find("hidden_act"), std::string::npos) << ErrorOf(j);
  j = text;
  j["layer_types"] = nlohmann::json::array();
  for (int i = 0; i < 48; ++i) j["layer_types"].push_back("sliding_attention");
  EXPECT_NE(ErrorOf(j).find("sliding_attention"), std::string::npos) << ErrorOf(j);
  // llama3 RoPE scaling belongs to Llama 4 here, not to another family.
  nlohmann::json mixtral = RandomModelConfig(Arch::kMixtral, ModelSize::kTiny).ToHfJson();
  mixtral["rope_scaling"] = text["rope_scaling"];
  EXPECT_NE(ErrorOf(mixtral).find("'llama3' is supported for llama4 only"), std::string::npos)
      << ErrorOf(mixtral);
}

// head_dim 8, theta 10^4, factor 8, low 1, high 4, original 64: wavelengths 2 pi x
// (1, 10, 100, 1000). Below 64 / 4 = 16: 1; above 64 / 1: 8; 62.83 between, with
// smooth = (64 / 62.83 - 1) / 3 = 0.0061974: 1 / ((1 - smooth) / 8 + smooth) = 7.66738.
TEST(Llama4Rope, Llama3FactorsByHand) {
  const LongRope lr = Llama3RopeFactors(8, 10000.0f, 8.0, 1.0, 4.0, 64);
  ASSERT_EQ(lr.long_factor.size(), 4u);
  EXPECT_EQ(lr.long_factor[0], 1.0f);
  EXPECT_NEAR(lr.long_factor[1], 7.66738, 1e-4);
  EXPECT_EQ(lr.long_factor[2], 8.0f);
  EXPECT_EQ(lr.long_factor[3], 8.0f);
  EXPECT_EQ(lr.short_factor, lr.long_factor);
}

// One head of width 2, queries 0 (uniform attention), values (j, 1) for key j: each output is
// the mean of the keys it sees. Chunks of 3: position 4 sees keys 3 and 4 (mean 3.5),
// position 2 sees 0..2 (mean 1), position 3 only itself.
TEST(Llama4Kernels, ChunkedAttentionSeesOnlyItsChunk) {
  const int64_t n = 6;
  std::vector<float> q(static_cast<size_t>(n * 2), 0.0f), k(static_cast<size_t>(n * 2), 0.5f), v;
  for (int64_t j = 0; j < n; ++j) v.insert(v.end(), {static_cast<float>(j), 1.0f});
  std::vector<float> out(static_cast<size_t>(n * 2));
  kernels::AttentionExtras extras;
  extras.chunk = 3;
  kernels::Attention(q.data(), n, 0, k.data(), v.data(), 1, 1, 2, 1.0f, out.data(), extras);
  const float want[] = {0.0f, 0.5f, 1.0f, 3.0f, 3.5f, 4.0f};
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_FLOAT_EQ(out[static_cast<size_t>(2 * i)], want[i]) << i;
    EXPECT_FLOAT_EQ(out[static_cast<size_t>(2 * i + 1)], 1.0f) << i;
  }
  // Decoding position 5 alone (pos0 = 5) over the same cache: the same value.
  std::vector<float> one(2);
  kernels::Attention(q.data(), 1, 5, k.data(), v.data(), 1, 1, 2, 1.0f, one.data(), extras);
  EXPECT_FLOAT_EQ(one[0], 4.0f);
  // Without chunks position 5 sees everything.
  kernels::Attention(q.data(), 1, 5, k.data(), v.data(), 1, 1, 2, 1.0f, one.data());
  EXPECT_FLOAT_EQ(one[0], 2.5f);
}

TEST(Llama4RandomModel, TinyAndSmallKeepTheTopology) {
  for (ModelSize size : {ModelSize::kTiny, ModelSize::kSmall}) {
    const ModelConfig c = RandomModelConfig(Arch::kLlama4, size);
    EXPECT_NO_THROW(c.Validate());
    EXPECT_FALSE(c.IsMoeLayer(0));
    EXPECT_TRUE(c.IsMoeLayer(1));
    EXPECT_TRUE(c.IsNopeLayer(3));
    EXPECT_EQ(c.AttentionChunk(3), 0);
    EXPECT_EQ(c.AttentionChunk(0), 8192);
    EXPECT_EQ(ModelConfig::FromHfJson(c.ToHfJson()).ToHfJson(), c.ToHfJson());
  }
}

// The tiny model with chunks of 8 and the temperature's floor at 4, so that 40 tokens cross
// five chunks and the temperature grows: moex against the double-precision reference, and
// the same bits in one pass, in passes of 7 and token by token.
TEST(Llama4Engine, ChunksAndTemperatureAgainstTheReference) {
  auto model = LoadModel(testing::TinyModelPath(Arch::kLlama4, DType::kF32));
  model->config.attention_chunk_size = 8;
  model->config.attn_temperature_floor = 4;
  model->config.Validate();
  ResidentMoeExecutor executor(*model);
  Transformer transformer(*model, executor);
  const std::vector<int32_t> ids = Prompt(40);
  auto run = [&](int64_t pass) {
    KvCache cache(model->config, static_cast<int64_t>(ids.size()));
    std::vector<float> logits;
    for (size_t at = 0; at < ids.size(); at += static_cast<size_t>(pass)) {
      const size_t len = std::min(static_cast<size_t>(pass), ids.size() - at);
      BatchItem item{&cache, std::span<const int32_t>(&ids[at], len), true};
      const std::vector<float> part = transformer.Forward({&item, 1});
      logits.insert(logits.end(), part.begin(), part.end());
    }
    return logits;
  };
  const std::vector<float> whole = run(40), sevens = run(7), single = run(1);
  const std::vector<double> ref = testing::ReferenceLogits(model->config, *model->weights, ids);
  const testing::LogitGap gap = testing::CompareLogits(whole, ref);
  EXPECT_LT(gap.max_err, 2e-4 * gap.scale) << "scale " << gap.scale;
  EXPECT_EQ(whole, sevens);
  EXPECT_EQ(whole, single);

  // Each mechanism changes the logits (so the comparison above covers it): no chunks, no
  // temperature, the router weight on the experts' output.
  for (int change = 0; change < 3; ++change) {
    ModelConfig c = model->config;
    if (change == 0) c.layer_chunked.assign(static_cast<size_t>(c.num_layers), false);
    if (change == 1) c.attn_temperature_floor = 0;
    if (change == 2) c.expert_weight_on_input = false;
    const testing::LogitGap other =
        testing::CompareLogits(whole, testing::ReferenceLogits(c, *model->weights, ids));
    EXPECT_GT(other.max_err, 1e-2 * other.scale) << "change " << change;
  }
}

TEST(Llama4Gguf, LlamaCppKeysAndTensorsWithTheCheckpointsLogits) {
  testing::TempDir temp;
  auto hf = LoadModel(testing::TinyModelPath(Arch::kLlama4, DType::kF32));
  const ModelConfig& c = hf->config;
  const std::string path = temp / "m.gguf";
  WriteGgufModel(c, *hf->weights, nullptr, path);

  const GgufFile f(path);
  EXPECT_EQ(f.GetString("general.architecture"), "llama4");
  EXPECT_EQ(f.GetInt("llama4.interleave_moe_layer_step"), 2);
  EXPECT_EQ(f.GetInt("llama4.attention.sliding_window"), 8192);
  EXPECT_EQ(f.GetInt("llama4.feed_forward_length"), c.intermediate_size);
  EXPECT_EQ(f.GetInt("llama4.expert_feed_forward_length"), c.moe_intermediate_size);
  auto shape = [&](const std::string& name) {
    const GgufTensorInfo* t = f.FindTensorInfo(name);
    return t == nullptr ? std::vector<int64_t>{-1} : t->ne;
  };
  const int64_t d = c.hidden_size, F = c.moe_intermediate_size;
  EXPECT_EQ(shape("blk.0.ffn_gate.weight"), (std::vector<int64_t>{d, c.intermediate_size}));
  EXPECT_EQ(f.FindTensorInfo("blk.0.ffn_gate_inp.weight"), nullptr);
  EXPECT_EQ(shape("blk.1.ffn_gate_inp.weight"), (std::vector<int64_t>{d, c.num_experts}));
  EXPECT_EQ(shape("blk.1.ffn_gate_exps.weight"), (std::vector<int64_t>{d, F, c.num_experts}));
  EXPECT_EQ(shape("blk.1.ffn_gate_shexp.weight"), (std::vector<int64_t>{d, F}));

  auto gguf = LoadModel(path);
  EXPECT_EQ(gguf->config.ToHfJson(), c.ToHfJson());
  const std::vector<int32_t> ids = Prompt(30);
  ResidentMoeExecutor ea(*hf), eb(*gguf);
  const std::vector<float> want = testing::PrefillLogits(*hf, ea, ids);
  const std::vector<float> got = testing::PrefillLogits(*gguf, eb, ids);
  const testing::LogitGap gap =
      testing::CompareLogits(got, std::vector<double>(want.begin(), want.end()));
  EXPECT_LT(gap.max_err, 1e-5 * gap.scale);
}

// The tiny checkpoint rewritten as a published Llama4ForConditionalGeneration stores it:
// config.json's keys in text_config, the language model under "language_model.", the
// experts fused (gate_up_proj [E, d, 2F], down_proj [E, F, d]), a vision tensor beside. It
// loads as the same model (the same logits, bit for bit), and q/k rows come in moex's RoPE
// order: row j * head_dim / 2 + i of each head from the stored row 2i + j.
TEST(Llama4Hf, PublishedLayoutLoadsAsTheSameModel) {
  namespace fs = std::filesystem;
  testing::TempDir temp;
  const std::string src = testing::TinyModelPath(Arch::kLlama4, DType::kF32);
  auto plain = LoadModel(src);
  const ModelConfig& c = plain->config;
  const SafetensorsFile raw(src + "/model.safetensors");
  const TensorNames n = TensorNamesFor(c);
  const int64_t E = c.num_experts, d = c.hidden_size, F = c.moe_intermediate_size;

  SafetensorsWriter w;
  std::vector<std::vector<float>> fused;  // Kept until written.
  for (const TensorView& t : raw.tensors()) {
    if (t.name.find(".feed_forward.experts.") != std::string::npos) continue;
    w.Add("language_model." + t.name, t.dtype, t.shape, t.data);
  }
  for (int l = 0; l < c.num_layers; ++l) {
    if (!c.IsMoeLayer(l)) continue;
    std::vector<float> gate_up(static_cast<size_t>(E * d * 2 * F)),
        down(static_cast<size_t>(E * F * d));
    for (int64_t e = 0; e < E; ++e) {
      const auto get = [&](ExpertMatrix m) {
        const TensorView* t = raw.Find(n.Expert(l, static_cast<int>(e), m));
        EXPECT_NE(t, nullptr);
        return reinterpret_cast<const float*>(t->data);
      };
      const float *g = get(ExpertMatrix::kGate), *u = get(ExpertMatrix::kUp),
                  *dn = get(ExpertMatrix::kDown);
      for (int64_t k = 0; k < d; ++k)
        for (int64_t i = 0; i < F; ++i) {
          gate_up[static_cast<size_t>((e * d + k) * 2 * F + i)] = g[i * d + k];
          gate_up[static_cast<size_t>((e * d + k) * 2 * F + F + i)] = u[i * d + k];
        }
      for (int64_t i = 0; i < F; ++i)
        for (int64_t j = 0; j < d; ++j)
          down[static_cast<size_t>((e * F + i) * d + j)] = dn[j * F + i];
    }
    fused.push_back(std::move(gate_up));
    w.Add("language_model." + TensorNames::Layer(l, "feed_forward.experts.gate_up_proj"),
          DType::kF32, {E, d, 2 * F}, fused.back().data());
    fused.push_back(std::move(down));
    w.Add("language_model." + TensorNames::Layer(l, "feed_forward.experts.down_proj"), DType::kF32,
          {E, F, d}, fused.back().data());
  }
  fused.push_back(std::vector<float>(8, 1.0f));
  w.Add("vision_model.patch_embedding.linear.weight", DType::kF32, {2, 4}, fused.back().data());
  const fs::path dir = temp / "published";
  fs::create_directories(dir);
  w.WriteCheckpoint(dir.string());
  nlohmann::json text = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  nlohmann::json config = {{"model_type", "llama4"},
                           {"architectures", {"Llama4ForConditionalGeneration"}},
                           {"text_config", text},
                           {"vision_config", {{"hidden_size", 8}}}};
  std::ofstream(dir / "config.json") << config.dump();

  auto published = LoadModel(dir.string());
  EXPECT_EQ(published->config.ToHfJson(), c.ToHfJson());
  const std::vector<int32_t> ids = Prompt(12);
  ResidentMoeExecutor ea(*plain), eb(*published);
  EXPECT_EQ(testing::PrefillLogits(*published, eb, ids), testing::PrefillLogits(*plain, ea, ids));

  // A built expert is freed when released, and built again (the same bytes) when found.
  const std::string gate = n.Expert(1, 0, ExpertMatrix::kGate);
  const TensorView& built = published->weights->Get(gate);
  const std::vector<std::byte> before(built.data, built.data + built.nbytes);
  published->weights->ReleasePages(built);
  const TensorView& again = published->weights->Get(gate);
  ASSERT_NE(again.data, nullptr);
  EXPECT_EQ(std::vector<std::byte>(again.data, again.data + again.nbytes), before);

  // The reordering by hand, on layer 0's q_proj.
  const int64_t hd = c.head_dim, half = hd / 2;
  const TensorView& stored = *raw.Find(TensorNames::Layer(0, n.q));
  const TensorView& read = plain->weights->Get(TensorNames::Layer(0, n.q));
  const auto* s = reinterpret_cast<const float*>(stored.data);
  const auto* r = reinterpret_cast<const float*>(read.data);
  for (int64_t head = 0; head < c.num_heads; ++head)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i)
        EXPECT_EQ(r[(head * hd + j * half + i) * d], s[(head * hd + 2 * i + j) * d]);
}

// Configs llama.cpp would run differently are not written as GGUF.
TEST(Llama4Gguf, RefusesToWriteWhatLlamaCppComputesOtherwise) {
  testing::TempDir temp;
  auto hf = LoadModel(testing::TinyModelPath(Arch::kLlama4, DType::kF32));
  ModelConfig c = hf->config;
  c.attention_chunk_size = 32;
  const std::string error =
      testing::ErrorOf([&] { WriteGgufModel(c, *hf->weights, nullptr, temp / "m.gguf"); });
  EXPECT_NE(error.find("chunk of 8192"), std::string::npos) << error;
}

// llama.cpp splits Llama 4's text as o200k's (its "llama4" pre-tokenizer is GPT-4o's).
TEST(Llama4Tokenizer, PreTokenizerIsO200k) {
  EXPECT_EQ(PreTokenizerPatterns("llama4"), PreTokenizerPatterns("gpt-4o"));
  EXPECT_NE(PreTokenizerPatterns("llama4"), PreTokenizerPatterns("qwen2"));
}

}  // namespace
}  // namespace moex

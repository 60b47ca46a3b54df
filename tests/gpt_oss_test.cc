// gpt-oss (model_type gpt_oss): its config.json keys and errors, the fused HF expert layout
// as moex reads it, the clamped SwiGLU with expert biases, attention sinks and the sliding
// window on hand-computed cases, HF's generic YaRN without truncation, and llama.cpp's
// "gpt-oss" GGUF (keys, tensor names, the checkpoint's logits, MXFP4 experts).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/moe_executor.h"
#include "engine/rope.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "kernels/activation_precision.h"
#include "kernels/ops.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/tensor_names.h"
#include "support/engine_runs.h"
#include "support/reference_model.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

// The published gpt-oss-20b config.json (its keys that moex reads).
nlohmann::json GptOss20bConfig() {
  return nlohmann::json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
    "attention_bias": true, "attention_dropout": 0.0, "eos_token_id": 200002,
    "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
    "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
      "full_attention", "sliding_attention", "full_attention", "sliding_attention",
      "full_attention", "sliding_attention", "full_attention", "sliding_attention",
      "full_attention", "sliding_attention", "full_attention", "sliding_attention",
      "full_attention", "sliding_attention", "full_attention", "sliding_attention",
      "full_attention", "sliding_attention", "full_attention", "sliding_attention",
      "full_attention"],
    "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
    "output_router_logits": false, "pad_token_id": 199999, "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
      "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
    "swiglu_limit": 7.0, "tie_word_embeddings": false, "vocab_size": 201088
  })");
}

TEST(GptOssConfig, ReadsThePublishedConfig) {
  const ModelConfig c = ModelConfig::FromHfJson(GptOss20bConfig());
  EXPECT_EQ(c.arch, Arch::kGptOss);
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.num_experts, 32);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.moe_intermediate_size, 2880);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.AttentionWindow(0), 128);
  EXPECT_EQ(c.AttentionWindow(1), 0);
  EXPECT_FLOAT_EQ(c.swiglu_limit, 7.0f);
  EXPECT_TRUE(c.attention_bias && c.attention_out_bias && c.attention_sinks && c.router_bias);
  EXPECT_TRUE(c.norm_topk_prob);
  ASSERT_TRUE(c.yarn.has_value());
  EXPECT_FALSE(c.yarn->truncate);
  EXPECT_FLOAT_EQ(c.yarn->factor, 32.0f);
  EXPECT_EQ(c.yarn->original_max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(c.rope_theta, 150000.0f);
  // The published shape is random-model's full size.
  EXPECT_EQ(c.ToHfJson(), RandomModelConfig(Arch::kGptOss, ModelSize::kFull).ToHfJson());
}

TEST(GptOssConfig, DefaultsAndRoundTrip) {
  nlohmann::json j = GptOss20bConfig();
  j.erase("layer_types");
  j.erase("swiglu_limit");
  j.erase("sliding_window");
  const ModelConfig c = ModelConfig::FromHfJson(j);
  EXPECT_EQ(c.layer_sliding, AlternatingSlidingLayers(24));  // GptOssConfig's default.
  EXPECT_FLOAT_EQ(c.swiglu_limit, 7.0f);
  EXPECT_EQ(c.sliding_window, 128);
  for (ModelSize size : {ModelSize::kTiny, ModelSize::kSmall, ModelSize::kFull}) {
    const ModelConfig r = RandomModelConfig(Arch::kGptOss, size);
    EXPECT_EQ(ModelConfig::FromHfJson(r.ToHfJson()).ToHfJson(), r.ToHfJson());
  }
  ModelConfig custom = RandomModelConfig(Arch::kGptOss, ModelSize::kTiny);
  custom.layer_sliding = {false, false, true};
  custom.yarn->truncate = true;
  const ModelConfig back = ModelConfig::FromHfJson(custom.ToHfJson());
  EXPECT_EQ(back.layer_sliding, custom.layer_sliding);
  EXPECT_TRUE(back.yarn->truncate);
}

void ExpectConfigError(const nlohmann::json& j, const std::string& needle) {
  try {
    ModelConfig::FromHfJson(j);
    ADD_FAILURE() << "accepted: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GptOssConfig, BadKeysAreNamed) {
  nlohmann::json j = GptOss20bConfig();
  j["layer_types"][3] = "chunked_attention";
  ExpectConfigError(j, "layer_types entries");
  j = GptOss20bConfig();
  j["layer_types"].erase(0);
  ExpectConfigError(j, "layer_types has 23 entries for 24 layers");
  j = GptOss20bConfig();
  j["rope_scaling"]["factor"] = 16.0;
  ExpectConfigError(j, "rope_scaling.factor (16) must equal max_position_embeddings");
  j = GptOss20bConfig();
  j["rope_scaling"]["attention_factor"] = 1.2;
  ExpectConfigError(j, "rope_scaling.attention_factor is not supported");
  j = GptOss20bConfig();
  j["swiglu_limit"] = -1.0;
  ExpectConfigError(j, "swiglu_limit");
  j = GptOss20bConfig();
  j["sliding_window"] = 0;
  ExpectConfigError(j, "sliding_window must be > 0");
  j = GptOss20bConfig();
  j["hidden_act"] = "gelu";
  ExpectConfigError(j, "hidden_act");
  j = GptOss20bConfig();
  j.erase("num_local_experts");
  ExpectConfigError(j, "num_local_experts");
}

// The checkpoint stores experts fused: gate_up_proj [E, d, 2F] with gate in the even
// columns, down_proj [E, F, d]. moex reads expert e's gate row i = column 2i of
// gate_up_proj[e], up row i = column 2i + 1, down column i = row i of down_proj[e].
TEST(GptOssWeights, FusedExpertsAreReadDeinterleavedAndTransposed) {
  auto model = LoadModel(testing::TinyModelPath(Arch::kGptOss, DType::kF32));
  const ModelConfig& c = model->config;
  const int64_t d = c.hidden_size, F = c.moe_intermediate_size;
  const WeightSource& w = *model->weights;
  const std::vector<float> gu = TensorToF32(w.Get("model.layers.1.mlp.experts.gate_up_proj"));
  const std::vector<float> gub = TensorToF32(w.Get("model.layers.1.mlp.experts.gate_up_proj_bias"));
  const std::vector<float> dn = TensorToF32(w.Get("model.layers.1.mlp.experts.down_proj"));
  const TensorNames n = TensorNamesFor(c);
  const int e = 5;
  const std::vector<float> gate = TensorToF32(w.Get(n.Expert(1, e, ExpertMatrix::kGate), {F, d}));
  const std::vector<float> up = TensorToF32(w.Get(n.Expert(1, e, ExpertMatrix::kUp), {F, d}));
  const std::vector<float> down = TensorToF32(w.Get(n.Expert(1, e, ExpertMatrix::kDown), {d, F}));
  for (int64_t i = 0; i < F; ++i) {
    for (int64_t k = 0; k < d; ++k) {
      ASSERT_EQ(gate[i * d + k], gu[(e * d + k) * 2 * F + 2 * i]);
      ASSERT_EQ(up[i * d + k], gu[(e * d + k) * 2 * F + 2 * i + 1]);
      ASSERT_EQ(down[k * F + i], dn[(e * F + i) * d + k]);
    }
    EXPECT_EQ(model->layers[1].expert_gate_bias[e * F + i], gub[e * 2 * F + 2 * i]);
    EXPECT_EQ(model->layers[1].expert_up_bias[e * F + i], gub[e * 2 * F + 2 * i + 1]);
  }
  // Every tensor is read: the fused ones through their per-expert views.
  EXPECT_TRUE(model->unused_tensors.empty());
}

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// One neuron, d = 2: gate row [1, 2], up row [0.5, -1], down column [2, 3], x = [1, 1],
// gate bias 0.5, up bias 0.25: gate = 3.5, up = -0.25 before the activation.
TEST(GptOssActivation, ClampedSwiGluWithBiasesOnAHandComputedNeuron) {
  const float rec[6] = {1, 2, 0.5f, -1, 2, 3};
  const float x[2] = {1, 1};
  const float gb = 0.5f, ub = 0.25f;
  for (float limit : {7.0f, 1.0f}) {
    SCOPED_TRACE(limit);
    float y[2] = {10, 20};  // Accumulated into.
    kernels::ExpertJob job{reinterpret_cast<const std::byte*>(rec), 1, x, 1, y};
    job.gate_bias = &gb;
    job.up_bias = &ub;
    kernels::ExpertActivation act;
    act.limit = limit;
    kernels::ExpertFfn(std::span<const kernels::ExpertJob>(&job, 1), DType::kF32, 2, act);
    const double g = std::min(3.5, double{limit});
    const double u = std::clamp(-0.25, -double{limit}, double{limit});
    const double h = (u + 1) * g * Sigmoid(1.702 * g);
    EXPECT_NEAR(y[0], 10 + 2 * h, 1e-5);
    EXPECT_NEAR(y[1], 20 + 3 * h, 1e-5);
  }
  // The up clamp from below: up = -9 clamps to -7, so (up + 1) = -6.
  const float rec2[6] = {1, 0, -9, 0, 1, 0};
  float y[2] = {0, 0};
  const kernels::ExpertJob job{reinterpret_cast<const std::byte*>(rec2), 1, x, 1, y};
  kernels::ExpertActivation act;
  act.limit = 7.0f;
  kernels::ExpertFfn(std::span<const kernels::ExpertJob>(&job, 1), DType::kF32, 2, act);
  EXPECT_NEAR(y[0], -6 * 1 * Sigmoid(1.702), 1e-5);
}

// Biased, clamped experts in bf16 over 3 tokens: two chunks give the bits of one job, and a
// token computed alone the bits of the same token in the batch.
TEST(GptOssActivation, ChunkAndBatchInvariantWithBiases) {
  const int64_t d = 64, F = 96, n = 3;
  std::vector<uint16_t> rec(static_cast<size_t>(3 * d * F));
  for (size_t i = 0; i < rec.size(); ++i)
    rec[i] = F32ToBF16(std::sin(static_cast<float>(i) * 0.37f) * 0.4f);
  std::vector<float> x(static_cast<size_t>(n * d)), gb(F), ub(F);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(static_cast<float>(i) * 0.11f) * 2;
  for (int64_t i = 0; i < F; ++i) {
    gb[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    ub[static_cast<size_t>(i)] = 0.02f * static_cast<float>(i % 7) - 0.06f;
  }
  kernels::ExpertActivation act;
  act.limit = 0.8f;  // Small enough that some neurons clamp.
  const auto* base = reinterpret_cast<const std::byte*>(rec.data());
  const size_t rec_bytes = kernels::ExpertRecordBytes(DType::kBF16, d);
  std::vector<float> whole(static_cast<size_t>(n * d), 0.0f), chunked = whole;
  kernels::ExpertJob job{base, F, x.data(), n, whole.data(), gb.data(), ub.data()};
  kernels::ExpertFfn(std::span<const kernels::ExpertJob>(&job, 1), DType::kBF16, d, act);
  for (int64_t a : {int64_t{0}, int64_t{40}}) {
    const int64_t count = a == 0 ? 40 : F - 40;
    kernels::ExpertJob part{base + static_cast<size_t>(a) * rec_bytes, count, x.data(), n,
                            chunked.data(), gb.data() + a, ub.data() + a};
    kernels::ExpertFfn(std::span<const kernels::ExpertJob>(&part, 1), DType::kBF16, d, act);
  }
  EXPECT_EQ(whole, chunked);
  std::vector<float> alone(static_cast<size_t>(d), 0.0f);
  kernels::ExpertJob one{base, F, x.data() + d, 1, alone.data(), gb.data(), ub.data()};
  kernels::ExpertFfn(std::span<const kernels::ExpertJob>(&one, 1), DType::kBF16, d, act);
  EXPECT_EQ(alone, std::vector<float>(whole.begin() + d, whole.begin() + 2 * d));
  // Without the activation's clamp the result differs: the limit is in effect.
  std::vector<float> silu(static_cast<size_t>(n * d), 0.0f);
  kernels::ExpertJob plain{base, F, x.data(), n, silu.data(), gb.data(), ub.data()};
  kernels::ExpertFfn(std::span<const kernels::ExpertJob>(&plain, 1), DType::kBF16, d);
  EXPECT_NE(silu, whole);
}

// One head of size 2, keys at positions 0..2, the query at position 2, scale 1:
// softmax over [scores in the window, sink] with the sink's column dropped.
TEST(GptOssAttention, SinkAndWindowOnAHandComputedHead) {
  const float q[2] = {1.0f, 0.5f};
  const float k[6] = {1, 0, 0, 2, -1, 1};
  const float v[6] = {1, 2, 3, 4, 5, 6};
  const float sink = 0.7f;
  const double s[3] = {1.0, 1.0, -0.5};  // q . k_j
  for (int64_t window : {int64_t{0}, int64_t{2}}) {
    SCOPED_TRACE(window);
    float out[2];
    kernels::AttentionExtras extras;
    extras.sinks = &sink;
    extras.window = window;
    // n_q = 1 at pos0 = 2: attends keys 0..2 (window 2: keys 1, 2).
    kernels::Attention(q, 1, 2, k, v, 1, 1, 2, 1.0f, out, extras);
    const int first = window == 0 ? 0 : 1;
    double denom = std::exp(double{sink}), o0 = 0, o1 = 0;
    for (int j = first; j < 3; ++j) {
      const double p = std::exp(s[j]);
      denom += p;
      o0 += p * v[2 * j];
      o1 += p * v[2 * j + 1];
    }
    EXPECT_NEAR(out[0], o0 / denom, 1e-6);
    EXPECT_NEAR(out[1], o1 / denom, 1e-6);
  }
  // No extras: the plain softmax, unchanged.
  float out[2];
  kernels::Attention(q, 1, 2, k, v, 1, 1, 2, 1.0f, out);
  const double p0 = std::exp(1.0), p2 = std::exp(-0.5);
  EXPECT_NEAR(out[0], (p0 * 1 + p0 * 3 + p2 * 5) / (2 * p0 + p2), 1e-6);
}

// HF's generic YaRN with truncate false keeps the fractional correction range: for the
// tiny shape (head_dim 16, theta 150000, factor 4, original 32) high is 1.0918, not 2.
TEST(GptOssYarn, TruncateFalseKeepsTheFractionalRange) {
  Yarn y;
  y.factor = 4;
  y.original_max_position_embeddings = 32;
  const int64_t hd = 16;
  const double theta = 150000;
  const auto dim = [&](double rot) {
    return hd * std::log(32 / (rot * 2 * M_PI)) / (2 * std::log(theta));
  };
  const double high = dim(1.0);  // low = max(dim(32), 0) = 0.
  ASSERT_LT(dim(32.0), 0.0);
  const double mscale = 0.1 * std::log(4.0) + 1;
  for (bool truncate : {false, true}) {
    SCOPED_TRACE(truncate);
    y.truncate = truncate;
    const RopeTable rope(hd, static_cast<float>(theta), y);
    float cos[8], sin[8];
    rope.Angles(1, 1, cos, sin);
    const double h = truncate ? std::ceil(high) : high;
    const double keep = 1 - std::clamp(1.0 / h, 0.0, 1.0);  // Frequency index 1.
    const double base = std::pow(theta, 2.0 / hd);
    const double inv = (1 / (4 * base)) * (1 - keep) + (1 / base) * keep;
    EXPECT_NEAR(cos[1], std::cos(inv) * mscale, 1e-6);
    EXPECT_NEAR(sin[1], std::sin(inv) * mscale, 1e-6);
  }
}

// A prompt longer than the window: the sliding layers drop keys beyond it (the reference
// agrees), and the same tokens generated step by step through the cache give the bits of
// one prefill.
TEST(GptOssEngine, LongerThanTheWindowMatchesTheReference) {
  auto model = LoadModel(testing::TinyModelPath(Arch::kGptOss, DType::kF32));
  ASSERT_EQ(model->config.sliding_window, 4);
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(static_cast<int32_t>((i * 53 + 11) % 512));
  ResidentMoeExecutor executor(*model);
  const std::vector<float> logits = testing::PrefillLogits(*model, executor, ids);
  const std::vector<double> ref = testing::ReferenceLogits(model->config, *model->weights, ids);
  ASSERT_EQ(logits.size(), ref.size());
  const testing::LogitGap gap = testing::CompareLogits(logits, ref);
  EXPECT_LT(gap.max_err, 1e-4 * gap.scale) << gap.max_err << " of " << gap.scale;
}

// ---------------------------------------------------------------------------------------
// GGUF.

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::abs(double{a[i]} - b[i]));
  return m;
}

const std::vector<int32_t> kIds = {1, 17, 300, 42, 42, 511, 0, 99, 256, 7};

std::vector<float> Logits(const Model& model) {
  ResidentMoeExecutor executor(model);
  return testing::PrefillLogits(model, executor, kIds);
}

class GptOssGguf : public ::testing::TestWithParam<DType> {
 protected:
  testing::TempDir temp_;
};

TEST_P(GptOssGguf, LlamaCppKeysAndTensorsWithTheCheckpointsLogits) {
  auto hf = LoadModel(testing::TinyModelPath(Arch::kGptOss, GetParam()));
  const ModelConfig& c = hf->config;
  const std::string path = temp_ / "m.gguf";
  WriteGgufModel(c, *hf->weights, nullptr, path);
  {
    const GgufFile f(path);
    EXPECT_EQ(f.GetString("general.architecture"), "gpt-oss");
    EXPECT_EQ(f.GetInt("gpt-oss.attention.sliding_window"), 4);
    EXPECT_EQ(f.GetInt("gpt-oss.expert_feed_forward_length"), c.moe_intermediate_size);
    EXPECT_EQ(f.GetString("gpt-oss.rope.scaling.type"), "yarn");
    EXPECT_EQ(f.GetInt("gpt-oss.rope.scaling.original_context_length"), 32);
    EXPECT_FLOAT_EQ(static_cast<float>(f.GetFloat("gpt-oss.swiglu_limit")), 1.0f);  // != 7.
    EXPECT_EQ(f.Find("gpt-oss.rope.scaling.yarn_truncate"), nullptr);  // false: llama.cpp's.
    const GgufTensorInfo* sinks = f.FindTensorInfo("blk.0.attn_sinks.weight");
    ASSERT_NE(sinks, nullptr);
    EXPECT_EQ(sinks->shape(), (std::vector<int64_t>{c.num_heads}));
    const GgufTensorInfo* gate_b = f.FindTensorInfo("blk.2.ffn_gate_exps.bias");
    ASSERT_NE(gate_b, nullptr);
    EXPECT_EQ(gate_b->shape(), (std::vector<int64_t>{c.num_experts, c.moe_intermediate_size}));
    for (const char* name :
         {"blk.0.post_attention_norm.weight", "blk.0.ffn_gate_inp.bias", "blk.0.ffn_up_exps.bias",
          "blk.0.ffn_down_exps.bias", "blk.0.attn_output.bias", "blk.1.ffn_gate_exps.weight"})
      EXPECT_NE(f.FindTensorInfo(name), nullptr) << name;
    EXPECT_EQ(f.FindTensorInfo("blk.0.ffn_norm.weight"), nullptr);
  }
  auto gguf = LoadModel(path);
  EXPECT_EQ(gguf->config.ToHfJson(), c.ToHfJson());
  EXPECT_EQ(gguf->expert_shape.gate_up, GetParam());
  // The same stored values and the same kernels: the same logits.
  EXPECT_LT(MaxDiff(Logits(*hf), Logits(*gguf)), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GptOssGguf, ::testing::Values(DType::kBF16, DType::kF32),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// llama.cpp's gpt-oss GGUFs store the experts in MXFP4: moex keeps the blocks (expert store
// and kernels), matches the reference on the same blocks, and offloads losslessly.
TEST(GptOssGgufMxfp4, ExpertsStayMxfp4MatchTheReferenceAndOffloadLosslessly) {
  // The reference is the exact dot of the dequantised weights: f32 activations.
  const kernels::ScopedActivationPrecision f32_activations(kernels::ActivationPrecision::kF32);
  testing::TempDir temp;
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kGptOss, ModelSize::kTiny);
  o.format = "gguf";
  o.gguf_type = DType::kMXFP4;
  o.seed = 3;
  o.out = temp / "m.gguf";
  WriteRandomModel(o);
  auto model = LoadModel(o.out);
  ASSERT_EQ(model->expert_shape.gate_up, DType::kMXFP4);
  // Biases and sinks stay f32 (never quantised).
  EXPECT_EQ(model->weights->Get("model.layers.0.mlp.experts.gate_proj.bias").dtype, DType::kF32);
  EXPECT_EQ(model->weights->Get("model.layers.0.self_attn.sinks").dtype, DType::kF32);
  ResidentMoeExecutor resident(*model);
  const std::vector<float> logits = testing::PrefillLogits(*model, resident, kIds);
  const std::vector<double> ref = testing::ReferenceLogits(model->config, *model->weights, kIds);
  const testing::LogitGap gap = testing::CompareLogits(logits, ref);
  EXPECT_LT(gap.max_err, 1e-4 * gap.scale) << gap.max_err << " of " << gap.scale;
  for (const char* budget : {"5%", "50%"}) {
    const std::string store = temp / "experts.moex";
    EXPECT_EQ(testing::OffloadedPrefillLogits(*model, kIds, store, budget), logits) << budget;
  }
}

// A copy of `src` with `key` set to `value` (a key llama.cpp might carry).
void WithKey(const std::string& src, const std::string& dst, const std::string& key,
             const GgufValue& value) {
  const GgufFile f(src);
  GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.Set(k, v);
  w.Set(key, value);
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    const TensorView* t = f.FindQuantizedTensor(info.name);
    w.AddTensor(info.name, t->dtype, t->shape, t->data);
  }
  w.Write(dst);
}

TEST(GptOssGgufErrors, UnknownKeysAndOtherRopeScalingAreRefused) {
  testing::TempDir temp;
  auto hf = LoadModel(testing::TinyModelPath(Arch::kGptOss, DType::kF32));
  const std::string path = temp / "m.gguf";
  WriteGgufModel(hf->config, *hf->weights, nullptr, path);
  const std::string bad = temp / "bad.gguf";
  WithKey(path, bad, "gpt-oss.attention.sliding_window_pattern", GgufValue::U32(3));
  try {
    LoadModel(bad);
    ADD_FAILURE() << "unknown key accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpt-oss.attention.sliding_window_pattern"),
              std::string::npos)
        << e.what();
  }
  WithKey(path, bad, "gpt-oss.rope.scaling.type", GgufValue::String("linear"));
  try {
    LoadModel(bad);
    ADD_FAILURE() << "linear rope scaling accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'linear' is not supported for gpt-oss"),
              std::string::npos)
        << e.what();
  }
  // A layer pattern llama.cpp cannot express is refused when writing.
  ModelConfig other = hf->config;
  other.layer_sliding = {true, true, false};
  EXPECT_THROW(WriteGgufModel(other, *hf->weights, nullptr, temp / "x.gguf"), Error);
}

}  // namespace
}  // namespace moex

// Qwen3-Next (qwen3_next) specifics: config.json parsing (the published config, errors), the
// random shapes, the Gated DeltaNet kernels (chunked against the token-by-token recurrence,
// both against a double-precision loop), the engine's prefill in one pass against token by
// token and against the double-precision reference over several chunks, several sequences
// in one batch against each alone, the per-sequence state in the KV cache and prefix caching
// off. The short-prompt logits of every dtype are in engine_reference_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/kv_cache.h"
#include "engine/moe_executor.h"
#include "engine/prefix_cache.h"
#include "engine/transformer.h"
#include "io/gguf_file.h"
#include "kernels/delta_rule.h"
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

// Qwen/Qwen3-Next-80B-A3B-Instruct's config.json.
nlohmann::json NextJson() {
  return nlohmann::json::parse(R"({
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643,
    "decoder_sparse_step": 1, "eos_token_id": 151645, "full_attention_interval": 4,
    "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "mlp_only_layers": [], "moe_intermediate_size": 512,
    "norm_topk_prob": true, "num_attention_heads": 16, "num_experts": 512,
    "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
    "output_router_logits": false, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 10000000, "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 512, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
}

std::string ErrorOf(const nlohmann::json& j) {
  return testing::ErrorOf([&] { ModelConfig::FromHfJson(j); });
}

TEST(Qwen3NextConfig, ReadsTheInstructModelAsPublished) {
  const ModelConfig c = ModelConfig::FromHfJson(NextJson());
  EXPECT_EQ(c.arch, Arch::kQwen3Next);
  EXPECT_EQ(c.num_layers, 48);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.RotaryDim(), 64);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_TRUE(c.attention_output_gate);
  EXPECT_TRUE(c.qk_norm && c.qk_norm_per_head);
  EXPECT_EQ(c.norm_weight_offset, 1.0f);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.shared_expert_intermediate_size, 512);
  EXPECT_TRUE(c.shared_expert_gate);
  ASSERT_TRUE(c.delta_net.has_value());
  EXPECT_EQ(c.delta_net->num_k_heads, 16);
  EXPECT_EQ(c.delta_net->num_v_heads, 32);
  EXPECT_EQ(c.delta_net->k_head_dim, 128);
  EXPECT_EQ(c.delta_net->v_head_dim, 128);
  EXPECT_EQ(c.delta_net->conv_kernel, 4);
  ASSERT_EQ(c.layer_linear.size(), 48u);
  int attention = 0;
  for (int l = 0; l < 48; ++l) {
    EXPECT_EQ(c.IsLinearLayer(l), (l + 1) % 4 != 0) << l;
    attention += c.IsLinearLayer(l) ? 0 : 1;
  }
  EXPECT_EQ(attention, 12);
  // The published shape is the random model's full shape.
  EXPECT_EQ(RandomModelConfig(Arch::kQwen3Next, ModelSize::kFull).ToHfJson(), c.ToHfJson());
  // layer_types, when given, wins over the interval.
  nlohmann::json j = NextJson();
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"full_attention", "linear_attention", "linear_attention"};
  const ModelConfig typed = ModelConfig::FromHfJson(j);
  EXPECT_EQ(typed.layer_linear, (std::vector<bool>{false, true, true}));
}

TEST(Qwen3NextConfig, RefusesWhatItDoesNotCompute) {
  const std::vector<std::pair<std::pair<const char*, nlohmann::json>, const char*>> cases = {
      {{"decoder_sparse_step", 2}, "decoder_sparse_step 2"},
      {{"mlp_only_layers", {0, 3}}, "mlp_only_layers [0,3]"},
      {{"norm_topk_prob", false}, "norm_topk_prob false"},
      {{"attention_bias", true}, "attention_bias true"},
      {{"hidden_act", "gelu"}, "gelu"},
      {{"layer_types", {"sliding_attention"}}, "'sliding_attention'"},
      {{"linear_num_value_heads", 24}, "multiple of linear_num_key_heads"},
      {{"partial_rotary_factor", 0}, "partial_rotary_factor"},
  };
  for (const auto& [edit, message] : cases) {
    nlohmann::json j = NextJson();
    j[edit.first] = edit.second;
    const std::string error = ErrorOf(j);
    EXPECT_NE(error.find(message), std::string::npos) << edit.first << ": " << error;
  }
  nlohmann::json short_types = NextJson();
  short_types["layer_types"] = {"linear_attention", "full_attention"};
  EXPECT_NE(ErrorOf(short_types).find("layer_types has 2 entries for 48 layers"), std::string::npos)
      << ErrorOf(short_types);
}

TEST(Qwen3NextRandomModel, TinyAndSmallKeepTheTopology) {
  for (ModelSize size : {ModelSize::kTiny, ModelSize::kSmall}) {
    const ModelConfig c = RandomModelConfig(Arch::kQwen3Next, size);
    EXPECT_NO_THROW(c.Validate());
    EXPECT_EQ(c.RotaryDim() * 4, c.head_dim);
    ASSERT_TRUE(c.delta_net.has_value());
    EXPECT_EQ(c.delta_net->num_v_heads, 2 * c.delta_net->num_k_heads);
    EXPECT_FALSE(c.IsLinearLayer(3));  // Every fourth layer attends.
    EXPECT_TRUE(c.IsLinearLayer(0));
    EXPECT_EQ(ModelConfig::FromHfJson(c.ToHfJson()).ToHfJson(), c.ToHfJson());
  }
}

// The KV cache keeps rows for the attention layers only, and a fixed state for the others.
TEST(Qwen3NextKvCache, RowsForAttentionLayersStateForTheOthers) {
  const ModelConfig full = RandomModelConfig(Arch::kQwen3Next, ModelSize::kFull);
  // 12 attention layers x 2 KV heads x 256 x (K and V) x 4 bytes.
  EXPECT_EQ(KvCache::BytesPerToken(full), 12u * 2 * 256 * 2 * 4);
  // 36 DeltaNet layers x (3 x 8192 conv floats + 32 heads x (128 x 128 state floats + the
  // current chunk's 64 x (128 + 128 + 1) floats)) x 4 bytes.
  EXPECT_EQ(KvCache::StateBytes(full), 36u * (3 * 8192 + 32 * (128 * 128 + 64 * 257)) * 4);

  const ModelConfig c = RandomModelConfig(Arch::kQwen3Next, ModelSize::kTiny);
  KvCache cache(c, 8);
  EXPECT_EQ(cache.keys(0), nullptr);
  EXPECT_NE(cache.keys(3), nullptr);
  EXPECT_EQ(cache.recurrent_state(3), nullptr);
  ASSERT_NE(cache.recurrent_state(0), nullptr);
  cache.recurrent_state(0)[5] = 1.0f;
  cache.conv_state(2)[1] = 2.0f;
  cache.MarkStateLost();
  EXPECT_TRUE(cache.state_lost());
  cache.Reset();
  EXPECT_EQ(cache.recurrent_state(0)[5], 0.0f);
  EXPECT_EQ(cache.conv_state(2)[1], 0.0f);
  EXPECT_FALSE(cache.state_lost());
  // Blocks of rows cannot restore a recurrent state: the prefix cache stays off.
  EXPECT_FALSE(PrefixCache(c, 1 << 20).enabled());
  EXPECT_TRUE(PrefixCache(RandomModelConfig(Arch::kQwen3Moe, ModelSize::kTiny), 1 << 20).enabled());
}

// The gated delta rule in double precision, token by token, as HF's recurrent form.
std::vector<double> RecurrentReference(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, const std::vector<float>& g,
                                       const std::vector<float>& beta, int64_t n, int64_t dk,
                                       int64_t dv, std::vector<double>& S) {
  std::vector<double> out(static_cast<size_t>(n * dv));
  for (int64_t t = 0; t < n; ++t) {
    for (double& s : S) s *= std::exp(double{g[t]});
    for (int64_t j = 0; j < dv; ++j) {
      double mem = 0;
      for (int64_t i = 0; i < dk; ++i) mem += S[i * dv + j] * k[t * dk + i];
      const double delta = (v[t * dv + j] - mem) * beta[t];
      for (int64_t i = 0; i < dk; ++i) S[i * dv + j] += k[t * dk + i] * delta;
    }
    for (int64_t j = 0; j < dv; ++j) {
      double o = 0;
      for (int64_t i = 0; i < dk; ++i) o += S[i * dv + j] * q[t * dk + i];
      out[t * dv + j] = o;
    }
  }
  return out;
}

// The chunked rule against the double recurrence, and the same bits (outputs and state)
// whatever the calls: the whole sequence at once (two full chunks and a partial one), pieces
// crossing chunk boundaries, one token at a time.
TEST(Qwen3NextKernels, ChunkedDeltaRuleEqualsTheRecurrenceWhateverTheCalls) {
  const int64_t n = 150, dk = 16, dv = 8;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(n * dk), k(n * dk), v(n * dv), g(n), beta(n);
  for (int64_t t = 0; t < n; ++t) {
    double kk = 0;
    for (int64_t i = 0; i < dk; ++i) {
      q[t * dk + i] = u(rng) * 0.25f;
      k[t * dk + i] = u(rng);
      kk += k[t * dk + i] * k[t * dk + i];
    }
    for (int64_t i = 0; i < dk; ++i) k[t * dk + i] /= static_cast<float>(std::sqrt(kk));
    for (int64_t j = 0; j < dv; ++j) v[t * dv + j] = u(rng);
    g[t] = -0.3f * (u(rng) + 1.0f);  // Decays in [e^-0.6, 1].
    beta[t] = 0.5f * (u(rng) + 1.0f);
  }
  std::vector<double> S(dk * dv, 0.0);
  const std::vector<double> want = RecurrentReference(q, k, v, g, beta, n, dk, dv, S);
  const int64_t C = kernels::kDeltaRuleChunk;
  auto run = [&](const std::vector<int64_t>& calls, std::vector<float>& block) {
    block.assign(static_cast<size_t>(kernels::DeltaRuleState::Floats(dk, dv)), 0.0f);
    const kernels::DeltaRuleState state = kernels::DeltaRuleState::In(block.data(), dk, dv);
    std::vector<float> out(n * dv, 0.0f);
    int64_t t = 0;
    for (int64_t len : calls) {
      kernels::GatedDeltaRule(&q[t * dk], &k[t * dk], dk, &v[t * dv], dv, &g[t], &beta[t], 1, len,
                              dk, dv, state, t % C, &out[t * dv], dv);
      t += len;
    }
    EXPECT_EQ(t, n);
    return out;
  };
  std::vector<float> whole_state, piece_state, single_state;
  const std::vector<float> whole = run({n}, whole_state);
  const std::vector<float> pieces = run({5, 70, 1, 60, 14}, piece_state);
  const std::vector<float> single = run(std::vector<int64_t>(n, 1), single_state);
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(want[i] - whole[i]));
  EXPECT_LT(err, 2e-5);
  // The state S at the last chunk start (128) continued by the partial chunk's 22 tokens
  // gives the recurrence's final state.
  std::vector<double> folded(dk * dv);
  {
    const kernels::DeltaRuleState st = kernels::DeltaRuleState::In(whole_state.data(), dk, dv);
    const int64_t filled = n % C;
    for (int64_t r = 0; r < dk; ++r)
      for (int64_t j = 0; j < dv; ++j) {
        double x = std::exp(double{st.G[filled - 1]}) * st.S[r * dv + j];
        for (int64_t s = 0; s < filled; ++s)
          x += std::exp(double{st.G[filled - 1]} - st.G[s]) * st.k[s * dk + r] * st.u[s * dv + j];
        folded[r * dv + j] = x;
      }
  }
  double state_err = 0;
  for (size_t i = 0; i < S.size(); ++i) state_err = std::max(state_err, std::abs(S[i] - folded[i]));
  EXPECT_LT(state_err, 2e-5);
  EXPECT_EQ(whole, pieces);
  EXPECT_EQ(whole, single);
  EXPECT_EQ(whole_state, piece_state);
  EXPECT_EQ(whole_state, single_state);
}

// The convolution in pieces (its window carried between calls) equals one call.
TEST(Qwen3NextKernels, CausalConvContinuesItsWindow) {
  const int64_t n = 9, channels = 5, kernel = 4;
  std::vector<float> x(n * channels), w(channels * kernel);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.3f * static_cast<float>(i));
  std::vector<float> window((kernel - 1) * channels, 0.0f), whole(n * channels);
  kernels::CausalConvSilu(x.data(), channels, n, channels, w.data(), kernel, window.data(),
                          whole.data(), channels);
  std::vector<float> piece_window((kernel - 1) * channels, 0.0f), pieces(n * channels);
  int64_t t = 0;
  for (int64_t len : {1, 2, 1, 5}) {
    kernels::CausalConvSilu(&x[t * channels], channels, len, channels, w.data(), kernel,
                            piece_window.data(), &pieces[t * channels], channels);
    t += len;
  }
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_FLOAT_EQ(whole[i], pieces[i]) << i;
  EXPECT_EQ(window, piece_window);
  // Token 0 sees only itself (zeros before it): silu(w[c, kernel - 1] x[0, c]).
  for (int64_t c = 0; c < channels; ++c) {
    const float a = w[c * kernel + kernel - 1] * x[c];
    EXPECT_FLOAT_EQ(whole[c], a / (1.0f + std::exp(-a)));
  }
}

std::vector<int32_t> Prompt(int64_t n) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % 512));
  return ids;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::abs(double{a[i]} - b[i]));
  return m;
}

// A prefill of 150 tokens (three chunks, the last partial) in one pass, in passes of 40 and
// token by token give the same bits, and match the double-precision reference.
TEST(Qwen3NextEngine, ChunkedPrefillEqualsTokenByTokenAndTheReference) {
  auto model = LoadModel(testing::TinyModelPath(Arch::kQwen3Next, DType::kF32));
  ResidentMoeExecutor executor(*model);
  Transformer transformer(*model, executor);
  const std::vector<int32_t> ids = Prompt(150);
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
  const std::vector<float> whole = run(150), forty = run(40), single = run(1);
  const std::vector<double> ref = testing::ReferenceLogits(model->config, *model->weights, ids);
  const testing::LogitGap gap = testing::CompareLogits(whole, ref);
  EXPECT_LT(gap.max_err, 2e-4 * gap.scale) << "scale " << gap.scale;
  EXPECT_EQ(whole, single);
  EXPECT_EQ(whole, forty);
}

// Two sequences in one batch, one prefilling while the other decodes, give each one's bits
// alone: each continues its own state.
TEST(Qwen3NextEngine, SequencesInOneBatchEqualEachAlone) {
  auto model = LoadModel(testing::TinyModelPath(Arch::kQwen3Next, DType::kF32));
  ResidentMoeExecutor executor(*model);
  Transformer transformer(*model, executor);
  const std::vector<int32_t> a = Prompt(20), b = {5, 9, 200, 7, 7, 31, 400};
  auto alone = [&](const std::vector<int32_t>& ids, size_t split) {
    KvCache cache(model->config, 32);
    BatchItem first{&cache, std::span<const int32_t>(ids.data(), split), true};
    std::vector<float> logits = transformer.Forward({&first, 1});
    BatchItem rest{&cache, std::span<const int32_t>(ids.data() + split, ids.size() - split), true};
    const std::vector<float> more = transformer.Forward({&rest, 1});
    logits.insert(logits.end(), more.begin(), more.end());
    return logits;
  };
  const std::vector<float> want_a = alone(a, 19), want_b = alone(b, 3);
  KvCache ca(model->config, 32), cb(model->config, 32);
  BatchItem first{&ca, std::span<const int32_t>(a.data(), 19), true};
  std::vector<float> got_a = transformer.Forward({&first, 1});
  // a decodes its last token while b prefills its first three, then b the rest.
  BatchItem pass[] = {{&ca, std::span<const int32_t>(a.data() + 19, 1), true},
                      {&cb, std::span<const int32_t>(b.data(), 3), true}};
  const std::vector<float> both = transformer.Forward(pass);
  const size_t vocab = static_cast<size_t>(model->config.vocab_size);
  got_a.insert(got_a.end(), both.begin(), both.begin() + static_cast<ptrdiff_t>(vocab));
  std::vector<float> got_b(both.begin() + static_cast<ptrdiff_t>(vocab), both.end());
  BatchItem rest{&cb, std::span<const int32_t>(b.data() + 3, b.size() - 3), true};
  const std::vector<float> more = transformer.Forward({&rest, 1});
  got_b.insert(got_b.end(), more.begin(), more.end());
  EXPECT_EQ(want_a, got_a);
  EXPECT_EQ(want_b, got_b);
}

// A cache whose state a failed pass left partial is refused until it is reset.
TEST(Qwen3NextEngine, RefusesASequenceWhoseStateWasLost) {
  auto model = LoadModel(testing::TinyModelPath(Arch::kQwen3Next));
  ResidentMoeExecutor executor(*model);
  Transformer transformer(*model, executor);
  KvCache cache(model->config, 8);
  const std::vector<int32_t> ids = {1, 2, 3};
  cache.MarkStateLost();
  BatchItem item{&cache, ids, false};
  EXPECT_NE(testing::ErrorOf([&] {
              transformer.Forward({&item, 1});
            }).find("start the sequence"),
            std::string::npos);
  cache.Reset();
  EXPECT_NO_THROW(transformer.Forward({&item, 1}));
}

// llama.cpp's qwen3next names, keys and forms (its converter's): attn_qkv and attn_gate split
// from the grouped in_proj_qkvz, ssm_ba, ssm_a = -exp(A_log), ssm_dt.bias, ssm_conv1d
// [channels, kernel], post_attention_norm, the norms stored with the 1 added; the GGUF
// computes the checkpoint's logits.
TEST(Qwen3NextGguf, LlamaCppKeysAndTensorsWithTheCheckpointsLogits) {
  testing::TempDir temp;
  auto hf = LoadModel(testing::TinyModelPath(Arch::kQwen3Next));
  const ModelConfig& c = hf->config;
  const GatedDeltaNet& g = *c.delta_net;
  const std::string path = temp / "m.gguf";
  WriteGgufModel(c, *hf->weights, nullptr, path);

  const GgufFile f(path);
  EXPECT_EQ(f.GetString("general.architecture"), "qwen3next");
  EXPECT_EQ(f.GetInt("qwen3next.ssm.conv_kernel"), g.conv_kernel);
  EXPECT_EQ(f.GetInt("qwen3next.ssm.state_size"), g.k_head_dim);
  EXPECT_EQ(f.GetInt("qwen3next.ssm.group_count"), g.num_k_heads);
  EXPECT_EQ(f.GetInt("qwen3next.ssm.time_step_rank"), g.num_v_heads);
  EXPECT_EQ(f.GetInt("qwen3next.ssm.inner_size"), g.value_dim());
  EXPECT_EQ(f.GetInt("qwen3next.full_attention_interval"), 4);
  EXPECT_EQ(f.GetInt("qwen3next.rope.dimension_count"), c.RotaryDim());
  EXPECT_EQ(f.GetInt("qwen3next.expert_shared_feed_forward_length"),
            c.shared_expert_intermediate_size);
  auto shape = [&](const std::string& name) {
    const GgufTensorInfo* t = f.FindTensorInfo(name);
    return t == nullptr ? std::vector<int64_t>{-1} : t->ne;
  };
  // ne order (innermost first), as llama.cpp's create_tensor checks them.
  const int64_t d = c.hidden_size;
  EXPECT_EQ(shape("blk.0.attn_qkv.weight"), (std::vector<int64_t>{d, g.conv_dim()}));
  EXPECT_EQ(shape("blk.0.attn_gate.weight"), (std::vector<int64_t>{d, g.value_dim()}));
  EXPECT_EQ(shape("blk.0.ssm_ba.weight"), (std::vector<int64_t>{d, 2 * g.num_v_heads}));
  EXPECT_EQ(shape("blk.0.ssm_conv1d.weight"), (std::vector<int64_t>{g.conv_kernel, g.conv_dim()}));
  EXPECT_EQ(shape("blk.0.ssm_a"), (std::vector<int64_t>{g.num_v_heads}));
  EXPECT_EQ(shape("blk.0.ssm_dt.bias"), (std::vector<int64_t>{g.num_v_heads}));
  EXPECT_EQ(shape("blk.0.ssm_norm.weight"), (std::vector<int64_t>{g.v_head_dim}));
  EXPECT_EQ(shape("blk.0.ssm_out.weight"), (std::vector<int64_t>{g.value_dim(), d}));
  EXPECT_EQ(shape("blk.0.post_attention_norm.weight"), (std::vector<int64_t>{d}));
  EXPECT_EQ(f.FindTensorInfo("blk.0.ssm_in.weight"), nullptr);
  EXPECT_EQ(f.FindTensorInfo("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(shape("blk.3.attn_q.weight"), (std::vector<int64_t>{d, 2 * c.num_heads * c.head_dim}));
  EXPECT_EQ(shape("blk.3.attn_q_norm.weight"), (std::vector<int64_t>{c.head_dim}));
  // Stored values: 1 + w for the zero-centred norms, -exp(A_log) for ssm_a; the gated norm
  // as it is.
  const std::vector<float> norm = TensorToF32(*f.FindTensor("blk.0.attn_norm.weight"));
  const std::vector<float> hf_norm =
      TensorToF32(hf->weights->Get("model.layers.0.input_layernorm.weight"));
  EXPECT_FLOAT_EQ(norm[0], 1.0f + hf_norm[0]);
  const std::vector<float> a = TensorToF32(*f.FindTensor("blk.0.ssm_a"));
  const std::vector<float> a_log =
      TensorToF32(hf->weights->Get("model.layers.0.linear_attn.A_log"));
  EXPECT_FLOAT_EQ(a[1], -std::exp(a_log[1]));

  auto gguf = LoadModel(path);
  EXPECT_EQ(gguf->config.ToHfJson(), c.ToHfJson());
  EXPECT_EQ(gguf->config.norm_weight_offset, 0.0f);
  EXPECT_NE(gguf->layers[0].gdn_qkv, nullptr);  // The split projection, not HF's grouped one.
  const std::vector<int32_t> ids = Prompt(70);
  ResidentMoeExecutor ea(*hf), eb(*gguf);
  const std::vector<float> want = testing::PrefillLogits(*hf, ea, ids);
  const std::vector<float> got = testing::PrefillLogits(*gguf, eb, ids);
  EXPECT_LT(MaxDiff(want, got), 1e-3);
  // The GGUF's own forms against the double-precision reference.
  const testing::LogitGap gap =
      testing::CompareLogits(got, testing::ReferenceLogits(gguf->config, *gguf->weights, ids));
  EXPECT_LT(gap.max_err, 2e-4 * gap.scale);
}

}  // namespace
}  // namespace moex

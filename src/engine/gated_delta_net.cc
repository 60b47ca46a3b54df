// Gated DeltaNet layers (ModelConfig::GatedDeltaNet, Qwen3-Next's and Qwen3.5's linear attention),
// as HF's Qwen3NextGatedDeltaNet and llama.cpp's qwen3next / qwen35moe graphs compute them: the
// input projections, the causal convolution of q/k/v over the item's tokens continuing its window,
// the gated delta rule per v head continuing its state (kernels/delta_rule.h: chunks of 64 tokens
// from the sequence's start, whatever the passes), the per-head RMSNorm gated by silu(z), and
// out_proj. Every step is per token or per chunk position, so a sequence gets the same bits
// prefilled in one pass, in chunks or token by token, alone or batched.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "engine/transformer.h"
#include "kernels/delta_rule.h"
#include "kernels/ops.h"

namespace moex {

namespace {

// torch's softplus (beta 1, threshold 20): x above the threshold passes through.
float Softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

}  // namespace

void Transformer::GatedDeltaNet(int layer, std::span<const BatchItem> items, int64_t total) {
  const ModelConfig& c = model_.config;
  const ::moex::GatedDeltaNet& g = *c.delta_net;
  const LayerWeights& L = model_.layers[static_cast<size_t>(layer)];
  const int64_t d = c.hidden_size, nk = g.num_k_heads, nv = g.num_v_heads;
  const int64_t dk = g.k_head_dim, dv = g.v_head_dim, r = nv / nk;
  const int64_t key_dim = g.key_dim(), value_dim = g.value_dim(), conv_dim = g.conv_dim();
  const size_t T = static_cast<size_t>(total);
  Grow(gdn_qkv_, T * conv_dim);
  Grow(gdn_conv_, T * conv_dim);
  Grow(gdn_z_, T * value_dim);
  Grow(gdn_ba_, T * 2 * nv);
  Grow(gdn_beta_, T * nv);
  Grow(gdn_g_, T * nv);
  Grow(gdn_out_, T * value_dim);
  Grow(proj_, T * d);

  Norm(hidden_.data(), L.attn_norm, L.attn_norm_bias, total, normed_.data());
  if (L.gdn_qkvz != nullptr) {
    // HF's grouped layout: per key head, its q and k heads, then its r v heads and r z heads.
    const int64_t group = 2 * dk + 2 * r * dv;
    Grow(gdn_proj_, T * nk * group);
    const kernels::LinearOutput outs[] = {kernels::OutputOf(*L.gdn_qkvz, gdn_proj_.data()),
                                          kernels::OutputOf(*L.gdn_ba, gdn_ba_.data())};
    kernels::LinearMulti(outs, normed_.data(), total);
    for (size_t t = 0; t < T; ++t) {
      float* qkv = &gdn_qkv_[t * conv_dim];
      float* z = &gdn_z_[t * value_dim];
      for (int64_t h = 0; h < nk; ++h) {
        const float* src = &gdn_proj_[(t * nk + h) * group];
        std::memcpy(qkv + h * dk, src, sizeof(float) * dk);
        std::memcpy(qkv + key_dim + h * dk, src + dk, sizeof(float) * dk);
        std::memcpy(qkv + 2 * key_dim + h * r * dv, src + 2 * dk, sizeof(float) * r * dv);
        std::memcpy(z + h * r * dv, src + 2 * dk + r * dv, sizeof(float) * r * dv);
      }
    }
  } else if (L.gdn_ba != nullptr) {
    const kernels::LinearOutput outs[] = {kernels::OutputOf(*L.gdn_qkv, gdn_qkv_.data()),
                                          kernels::OutputOf(*L.gdn_z, gdn_z_.data()),
                                          kernels::OutputOf(*L.gdn_ba, gdn_ba_.data())};
    kernels::LinearMulti(outs, normed_.data(), total);
  } else {
    // Qwen3.5's four projections, each with llama.cpp's optional output scale; b and a go
    // to the two halves of gdn_ba_ ([T, nv] each).
    const kernels::LinearOutput outs[] = {
        kernels::OutputOf(*L.gdn_qkv, gdn_qkv_.data(), nullptr, L.gdn_qkv_scale),
        kernels::OutputOf(*L.gdn_z, gdn_z_.data(), nullptr, L.gdn_z_scale),
        kernels::OutputOf(*L.gdn_b, gdn_ba_.data(), nullptr, L.gdn_b_scale),
        kernels::OutputOf(*L.gdn_a, gdn_ba_.data() + T * nv, nullptr, L.gdn_a_scale)};
    kernels::LinearMulti(outs, normed_.data(), total);
  }
  // beta = sigmoid(b), decay g = -exp(A_log) softplus(a + dt_bias). Grouped (gdn_ba): per key
  // head its r b values, then its r a values, v head h = group * r + j; apart: b then a.
  const bool grouped_ba = L.gdn_ba != nullptr;
  for (size_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < nv; ++h) {
      const float* ba = &gdn_ba_[t * 2 * nv + (h / r) * 2 * r];
      const float b = grouped_ba ? ba[h % r] : gdn_ba_[t * nv + h];
      const float a = grouped_ba ? ba[r + h % r] : gdn_ba_[(T + t) * nv + h];
      gdn_beta_[t * nv + h] = 1.0f / (1.0f + std::exp(-b));
      gdn_g_[t * nv + h] = L.gdn_decay[h] * Softplus(a + L.gdn_dt_bias[h]);
    }

  // Each item's convolution continues its window; then q and k are L2-normalised per head
  // (HF's l2norm, eps 1e-6 under the root) and q scaled by 1/sqrt(dk).
  int64_t row = 0;
  for (const BatchItem& item : items) {
    const int64_t n = static_cast<int64_t>(item.tokens.size());
    kernels::CausalConvSilu(&gdn_qkv_[row * conv_dim], conv_dim, n, conv_dim, L.gdn_conv.data(),
                            g.conv_kernel, item.cache->conv_state(layer),
                            &gdn_conv_[row * conv_dim], conv_dim);
    row += n;
  }
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (size_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < 2 * nk; ++h) {
      float* x = &gdn_conv_[t * conv_dim + h * dk];
      float ss = 0.0f;
      for (int64_t i = 0; i < dk; ++i) ss += x[i] * x[i];
      const float inv = (h < nk ? q_scale : 1.0f) / std::sqrt(ss + 1e-6f);
      for (int64_t i = 0; i < dk; ++i) x[i] *= inv;
    }

  // The delta rule, one task per (item, v head).
  std::vector<int64_t> starts;
  row = 0;
  for (const BatchItem& item : items) {
    starts.push_back(row);
    row += static_cast<int64_t>(item.tokens.size());
  }
  ThreadPool::Global().ParallelForDynamic(
      items.size() * static_cast<size_t>(nv), 1, [&](size_t begin, size_t end, int) {
        for (size_t task = begin; task < end; ++task) {
          const size_t b = task / static_cast<size_t>(nv);
          const int64_t h = static_cast<int64_t>(task % static_cast<size_t>(nv));
          const int64_t start = starts[b];
          const int64_t n = static_cast<int64_t>(items[b].tokens.size());
          const float* base = &gdn_conv_[static_cast<size_t>(start * conv_dim)];
          KvCache& cache = *items[b].cache;
          const kernels::DeltaRuleState state = kernels::DeltaRuleState::In(
              cache.recurrent_state(layer) + h * kernels::DeltaRuleState::Floats(dk, dv), dk, dv);
          const int64_t kh = g.KeyHeadOf(h);
          kernels::GatedDeltaRule(
              base + kh * dk, base + key_dim + kh * dk, conv_dim, base + 2 * key_dim + h * dv,
              conv_dim, &gdn_g_[static_cast<size_t>(start * nv + h)],
              &gdn_beta_[static_cast<size_t>(start * nv + h)], nv, n, dk, dv, state,
              cache.length() % kernels::kDeltaRuleChunk,
              &gdn_out_[static_cast<size_t>(start * value_dim + h * dv)], value_dim);
        }
      });

  // RMSNorm per head (its own weight, no offset), times silu(z), then out_proj.
  kernels::RmsNorm(gdn_out_.data(), L.gdn_norm.data(), total * nv, dv, c.rms_norm_eps,
                   gdn_out_.data());
  for (size_t i = 0; i < T * static_cast<size_t>(value_dim); ++i) {
    const float z = gdn_z_[i];
    gdn_out_[i] *= z / (1.0f + std::exp(-z));
  }
  kernels::Linear(*L.gdn_out, gdn_out_.data(), total, proj_.data(), nullptr, L.gdn_out_scale);
  for (size_t i = 0; i < T * d; ++i) hidden_[i] += proj_[i];
}

}  // namespace moex

// Multi-head Latent Attention (DeepSeek-V2/V3) in its absorbed form: the cache holds, per
// token, the RMSNorm'd kv latent c (kv_lora_rank values) and the rotated k_pe (shared by
// every head). Since k_nope_h = W_uk_h c and v_h = W_uv_h c, each head's score is
//   q_nope_h . (W_uk_h c) + q_pe_h . k_pe = (W_uk_h^T q_nope_h) . c + q_pe_h . k_pe,
// so a query is moved into latent space once ([W_uk_h^T q_nope_h, q_pe_h]) and attends the
// cached rows [c, k_pe] directly: multi-query attention with one "kv head" of
// kv_lora_rank + qk_rope_head_dim values, done by the shared attention kernel (its value
// sum runs over the whole row; the k_pe lanes of the result are dropped). The head's
// output is then W_uv_h (sum_j p_j c_j). Both products run through the kernels' Linear on
// the weights' own bytes (LayerWeights::mla_k_up / mla_v_up). Mathematically the same as HF's
// decompressed K/V; the k_pe of RoPE uses adjacent pairs (HF permutes q_pe/k_pe before rotate_half,
// llama.cpp rotates them as LLAMA_ROPE_TYPE_NORM), see docs/architectures.md.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "engine/transformer.h"
#include "kernels/ops.h"

namespace moex {

namespace {

// Rotates adjacent pairs (x[2i], x[2i+1]) of x[0, 2 * half) by the angle of cos/sin[i].
void RopePairs(float* x, int64_t half, const float* cos, const float* sin) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cos[i] - b * sin[i];
    x[2 * i + 1] = b * cos[i] + a * sin[i];
  }
}

// y[t] = head h's matrix times x[t] for n tokens, on the calling thread (the caller runs the
// heads in parallel): the kernels' Linear in the matrix's own dtype, so a bf16 or q8_0 file
// streams its own bytes.
void HeadLinear(const MlaHeads& m, int64_t h, const float* x, int64_t n, float* y) {
  thread_local ThreadPool serial(1);
  kernels::Linear(m.Head(h), m.dtype, m.rows, m.cols, x, n, y, nullptr, serial);
}

// fn(h, in, out) for every head, in parallel, with per-thread scratch of `floats` each.
template <class Fn>
void PerHead(ThreadPool& pool, int64_t heads, const Fn& fn, size_t floats) {
  pool.ParallelFor(static_cast<size_t>(heads), 1, [&](size_t begin, size_t end, int) {
    thread_local std::vector<float> in, out;
    if (in.size() < floats) in.resize(floats);
    if (out.size() < floats) out.resize(floats);
    // Through local references: a lambda naming a thread_local reads the running thread's.
    float* in_data = in.data();
    float* out_data = out.data();
    for (size_t h = begin; h < end; ++h) fn(static_cast<int64_t>(h), in_data, out_data);
  });
}

}  // namespace

float MlaSoftmaxScale(const ModelConfig& c) {
  double scale = 1.0 / std::sqrt(static_cast<double>(c.mla->qk_head_dim()));
  if (c.yarn && c.yarn->mscale_all_dim != 0.0f) {
    const double m = YarnMscale(c.yarn->factor, c.yarn->mscale_all_dim);
    scale *= m * m;
  }
  return static_cast<float>(scale);
}

void Transformer::MlaAttention(int layer, std::span<const BatchItem> items, int64_t total) {
  const ModelConfig& c = model_.config;
  const Mla& m = *c.mla;
  const LayerWeights& L = model_.layers[static_cast<size_t>(layer)];
  const int64_t d = c.hidden_size, H = c.num_heads;
  const int64_t nope = m.qk_nope_head_dim, R = m.qk_rope_head_dim, lat = m.kv_lora_rank;
  const int64_t qk = m.qk_head_dim(), row_dim = m.cache_row(), v_dim = m.v_head_dim;
  const size_t T = static_cast<size_t>(total);
  Grow(q_, T * H * qk);
  Grow(k_, T * row_dim);  // The new tokens' cache rows.
  Grow(latent_q_, T * H * row_dim);
  Grow(latent_out_, T * H * row_dim);
  Grow(proj_, T * d);
  Grow(attn_, T * H * v_dim);

  Norm(hidden_.data(), L.attn_norm, L.attn_norm_bias, total, normed_.data());
  if (m.q_lora_rank > 0) {
    Grow(up_, T * m.q_lora_rank);
    const kernels::LinearOutput first[] = {kernels::OutputOf(*L.q_a, up_.data()),
                                           kernels::OutputOf(*L.kv_a, k_.data())};
    kernels::LinearMulti(first, normed_.data(), total);
    kernels::RmsNorm(up_.data(), L.q_a_norm.data(), total, m.q_lora_rank, c.rms_norm_eps,
                     up_.data());
    kernels::Linear(*L.q_b, up_.data(), total, q_.data());
  } else {
    const kernels::LinearOutput first[] = {kernels::OutputOf(*L.q, q_.data()),
                                           kernels::OutputOf(*L.kv_a, k_.data())};
    kernels::LinearMulti(first, normed_.data(), total);
  }
  const int64_t half = rope_.half();
  for (size_t t = 0; t < T; ++t) {
    float* kv = &k_[t * row_dim];
    kernels::RmsNorm(kv, L.kv_a_norm.data(), 1, lat, c.rms_norm_eps, kv);
    RopePairs(kv + lat, half, &cos_[t * half], &sin_[t * half]);
    for (int64_t h = 0; h < H; ++h)
      RopePairs(&q_[(t * H + h) * qk + nope], half, &cos_[t * half], &sin_[t * half]);
  }

  // Queries into latent space: [W_uk_h^T q_nope_h, q_pe_h] per (token, head), one head's
  // tokens per Linear (k_up's rows are W_uk_h's columns), heads in parallel.
  ThreadPool& pool = ThreadPool::Global();
  PerHead(
      pool, H,
      [&](int64_t h, float* in, float* out) {
        for (size_t t = 0; t < T; ++t)
          std::memcpy(in + t * nope, &q_[(t * H + h) * qk], sizeof(float) * nope);
        HeadLinear(L.mla_k_up, h, in, total, out);
        for (size_t t = 0; t < T; ++t) {
          float* lq = &latent_q_[(t * H + h) * row_dim];
          std::memcpy(lq, out + t * lat, sizeof(float) * lat);
          std::memcpy(lq + lat, &q_[(t * H + h) * qk + nope], sizeof(float) * R);
        }
      },
      T * std::max(nope, lat));

  int64_t row = 0;
  for (const BatchItem& item : items) {
    KvCache& cache = *item.cache;
    const int64_t n = static_cast<int64_t>(item.tokens.size());
    const int64_t pos0 = cache.length();
    std::memcpy(cache.keys(layer) + pos0 * row_dim, &k_[static_cast<size_t>(row * row_dim)],
                sizeof(float) * n * row_dim);
    kernels::Attention(&latent_q_[static_cast<size_t>(row * H * row_dim)], n, pos0,
                       cache.keys(layer), cache.keys(layer), H, 1, row_dim, MlaSoftmaxScale(c),
                       &latent_out_[static_cast<size_t>(row * H * row_dim)]);
    row += n;
  }

  // Each head's latent output up to v: v_h = W_uv_h o_h, into [T, H * v_head_dim].
  PerHead(
      pool, H,
      [&](int64_t h, float* in, float* out) {
        for (size_t t = 0; t < T; ++t)
          std::memcpy(in + t * lat, &latent_out_[(t * H + h) * row_dim], sizeof(float) * lat);
        HeadLinear(L.mla_v_up, h, in, total, out);
        for (size_t t = 0; t < T; ++t)
          std::memcpy(&attn_[(t * H + h) * v_dim], out + t * v_dim, sizeof(float) * v_dim);
      },
      T * std::max(lat, v_dim));
  kernels::Linear(*L.o, attn_.data(), total, proj_.data(), nullptr, L.o_scale);
  for (size_t i = 0; i < T * d; ++i) hidden_[i] += proj_[i];
}

}  // namespace moex

// Multi-head Latent Attention (DeepSeek-V2/V3) in its absorbed form: the cache holds, per
// token, the RMSNorm'd kv latent c (kv_lora_rank values) and the rotated k_pe (shared by
// every head). Since k_nope_h = W_uk_h c and v_h = W_uv_h c, each head's score is
//   q_nope_h . (W_uk_h c) + q_pe_h . k_pe = (W_uk_h^T q_nope_h) . c + q_pe_h . k_pe,
// so a query is moved into latent space once ([W_uk_h^T q_nope_h, q_pe_h]) and attends the
// cached rows [c, k_pe] directly: multi-query attention with one "kv head" of
// kv_lora_rank + qk_rope_head_dim values, done by the shared attention kernel (its value
// sum runs over the whole row; the k_pe lanes of the result are dropped). The head's
// output is then W_uv_h (sum_j p_j c_j). Mathematically the same as HF's decompressed
// K/V; the k_pe of RoPE uses adjacent pairs (HF permutes q_pe/k_pe before rotate_half,
// llama.cpp rotates them as LLAMA_ROPE_TYPE_NORM), see docs/architectures.md.
#include <cmath>
#include <cstring>

#include "core/thread_pool.h"
#include "engine/transformer.h"
#include "kernels/ops.h"

namespace moex {

namespace {

void Grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Rotates adjacent pairs (x[2i], x[2i+1]) of x[0, 2 * half) by the angle of cos/sin[i].
void RopePairs(float* x, int64_t half, const float* cos, const float* sin) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cos[i] - b * sin[i];
    x[2 * i + 1] = b * cos[i] + a * sin[i];
  }
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

  // Queries into latent space: [W_uk_h^T q_nope_h, q_pe_h] per (token, head).
  ThreadPool& pool = ThreadPool::Global();
  pool.ParallelFor(T * H, 1, [&](size_t begin, size_t end, int) {
    for (size_t th = begin; th < end; ++th) {
      const int64_t h = static_cast<int64_t>(th) % H;
      const float* qh = &q_[th * qk];
      float* out = &latent_q_[th * row_dim];
      std::fill(out, out + lat, 0.0f);
      const float* k_up = &L.mla_k_up[static_cast<size_t>(h * nope * lat)];
      for (int64_t j = 0; j < nope; ++j) {
        const float a = qh[j];
        const float* w = k_up + j * lat;
        for (int64_t l = 0; l < lat; ++l) out[l] += a * w[l];
      }
      std::memcpy(out + lat, qh + nope, sizeof(float) * R);
    }
  });

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
  pool.ParallelFor(T * H, 1, [&](size_t begin, size_t end, int) {
    for (size_t th = begin; th < end; ++th) {
      const int64_t h = static_cast<int64_t>(th) % H;
      const float* o = &latent_out_[th * row_dim];
      float* out = &attn_[th * v_dim];
      std::fill(out, out + v_dim, 0.0f);
      const float* v_up = &L.mla_v_up_t[static_cast<size_t>(h * lat * v_dim)];
      for (int64_t l = 0; l < lat; ++l) {
        const float a = o[l];
        const float* w = v_up + l * v_dim;
        for (int64_t i = 0; i < v_dim; ++i) out[i] += a * w[i];
      }
    }
  });
  kernels::Linear(*L.o, attn_.data(), total, proj_.data());
  for (size_t i = 0; i < T * d; ++i) hidden_[i] += proj_[i];
}

}  // namespace moex

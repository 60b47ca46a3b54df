// Causal grouped-query attention over an f32 KV cache, one (query, head) pair per unit of
// parallel work. Two passes per pair: scores and a max-subtracted softmax, then the
// probability-weighted sum of values. Every pair is computed independently by the same
// code, so a query's output does not depend on how many queries share the call.
#include "kernels/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/simd-inl.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace moex::kernels::HWY_NAMESPACE {

// p[j] = exp(s[j] - max s) in place over [0, n); returns the sum of p.
HWY_INLINE float ExpShifted(float* s, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  float max = s[0];
  for (size_t j = 1; j < n; ++j) max = std::max(max, s[j]);
  const VF vmax = hn::Set(df, max);
  VF sum = hn::Zero(df);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    const VF e = hn::Exp(df, hn::Sub(hn::LoadU(df, s + j), vmax));
    hn::StoreU(e, df, s + j);
    sum = hn::Add(sum, e);
  }
  if (j < n) {
    HWY_ALIGN float pad[kMaxLanes];
    std::fill(pad, pad + kMaxLanes, max);  // Padding lanes give exp(0); masked out below.
    std::memcpy(pad, s + j, (n - j) * sizeof(float));
    const VF e =
        hn::IfThenElseZero(hn::FirstN(df, n - j), hn::Exp(df, hn::Sub(hn::Load(df, pad), vmax)));
    hn::Store(e, df, pad);
    std::memcpy(s + j, pad, (n - j) * sizeof(float));
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(df, sum));
}

struct AttentionArgs {
  const float* q;
  size_t n_q, pos0;
  const float* k;
  const float* v;
  size_t n_heads, n_kv_heads, head_dim;
  float scale;
  float* out;
};

HWY_INLINE void AttendOne(const AttentionArgs& a, size_t i, size_t h, float* s, float* acc) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t hd = a.head_dim;
  const size_t kvh = h / (a.n_heads / a.n_kv_heads);
  const size_t len = a.pos0 + i + 1;
  const size_t kv_stride = a.n_kv_heads * hd;
  const float* qp = a.q + (i * a.n_heads + h) * hd;
  const float* xs[1] = {qp};
  const float* k0 = a.k + kvh * hd;
  // Scores, four keys per tile (DotTile's result per key does not depend on the tile).
  size_t j = 0;
  for (; j + 4 <= len; j += 4) {
    const std::byte* ks[4];
    for (size_t r = 0; r < 4; ++r)
      ks[r] = reinterpret_cast<const std::byte*>(k0 + (j + r) * kv_stride);
    DotTile<DType::kF32, 4, 1>(ks, xs, hd, s + j, 0);
  }
  for (; j < len; ++j) {
    const std::byte* ks[1] = {reinterpret_cast<const std::byte*>(k0 + j * kv_stride)};
    DotTile<DType::kF32, 1, 1>(ks, xs, hd, s + j, 0);
  }
  for (j = 0; j < len; ++j) s[j] *= a.scale;
  const float inv = 1.0f / ExpShifted(s, len);

  // acc = sum_j p_j v_j, in key order.
  const float* v0 = a.v + kvh * hd;
  const size_t hv = hd / N * N;
  std::fill(acc, acc + hd, 0.0f);
  const hn::CappedTag<float, 1> d1;
  for (j = 0; j < len; ++j) {
    const float* vj = v0 + j * kv_stride;
    const VF p = hn::Set(df, s[j]);
    size_t c = 0;
    for (; c < hv; c += N)
      hn::StoreU(hn::MulAdd(p, hn::LoadU(df, vj + c), hn::LoadU(df, acc + c)), df, acc + c);
    for (; c < hd; ++c) {
      acc[c] = hn::GetLane(hn::MulAdd(hn::Set(d1, s[j]), hn::Set(d1, vj[c]), hn::Set(d1, acc[c])));
    }
  }
  float* o = a.out + (i * a.n_heads + h) * hd;
  for (size_t c = 0; c < hd; ++c) o[c] = acc[c] * inv;
}

void AttentionImpl(const float* q, size_t n_q, size_t pos0, const float* k, const float* v,
                   size_t n_heads, size_t n_kv_heads, size_t head_dim, float scale, float* out,
                   ThreadPool* pool) {
  const AttentionArgs a{q, n_q, pos0, k, v, n_heads, n_kv_heads, head_dim, scale, out};
  const size_t units = a.n_q * a.n_heads;
  const auto run = [&](size_t b, size_t e, int) {
    thread_local std::vector<float> scratch;
    const size_t need = a.pos0 + a.n_q + a.head_dim;
    if (scratch.size() < need) scratch.resize(need);
    for (size_t u = b; u < e; ++u) {
      AttendOne(a, u / a.n_heads, u % a.n_heads, scratch.data(), scratch.data() + a.pos0 + a.n_q);
    }
  };
  const size_t work = units * (a.pos0 + a.n_q) * a.head_dim;
  if (work < (size_t{1} << 15) || pool->size() == 1) {
    run(0, units, 0);
  } else {
    pool->ParallelFor(units, 1, run);
  }
}

}  // namespace moex::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moex::kernels {

HWY_EXPORT(AttentionImpl);

void Attention(const float* q, int64_t n_q, int64_t pos0, const float* k, const float* v,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out,
               ThreadPool& pool) {
  Check(n_q >= 0 && pos0 >= 0 && head_dim > 0, "Attention: bad shape");
  Check(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "Attention: ", n_heads,
        " heads is not a multiple of ", n_kv_heads, " kv heads");
  if (n_q == 0) return;
  HWY_DYNAMIC_DISPATCH(AttentionImpl)
  (q, n_q, pos0, k, v, n_heads, n_kv_heads, head_dim, scale, out, &pool);
}

void Attention(const float* q, int64_t n_q, int64_t pos0, const float* k, const float* v,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out) {
  Attention(q, n_q, pos0, k, v, n_heads, n_kv_heads, head_dim, scale, out, ThreadPool::Global());
}

}  // namespace moex::kernels
#endif  // HWY_ONCE

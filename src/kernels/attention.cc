// Causal grouped-query attention over an f32 KV cache; a unit of parallel work is one query
// and a group of its heads. Two passes per (query, head) pair: scores and a max-subtracted
// softmax, then the probability-weighted sum of values. Every pair gets the same
// operations whatever its unit, so a query's output does not depend on how many queries
// share the call or how heads are grouped.
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

// p[j] = exp(s[j] - max) in place over [0, n); returns the sum of p. With a sink logit,
// max also covers it and exp(sink - max) joins the sum (the sink's own column is dropped).
HWY_INLINE float ExpShifted(float* s, size_t n, const float* sink) {
  const DF df;
  const size_t N = hn::Lanes(df);
  float max = s[0];
  for (size_t j = 1; j < n; ++j) max = std::max(max, s[j]);
  if (sink != nullptr) max = std::max(max, *sink);
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
  const float total = hn::GetLane(hn::SumOfLanes(df, sum));
  if (sink == nullptr) return total;
  const hn::CappedTag<float, 1> d1;
  return total + hn::GetLane(hn::Exp(d1, hn::Set(d1, *sink - max)));
}

// Heads one unit of work attends together (bounds a stack array).
constexpr size_t kMaxHeadsPerUnit = 64;

struct AttentionArgs {
  const float* q;
  size_t n_q, pos0;
  const float* k;
  const float* v;
  size_t n_heads, n_kv_heads, head_dim;
  float scale;
  float* out;
  const float* sinks;  // [n_heads] or null.
  size_t window;       // 0: causal over every earlier key.
  size_t chunk;        // 0: no chunks.
};

// Heads [h0, h1) of query i. Keys are visited in the outer loop so that each K and V row
// is read once, as one contiguous run over the group's heads (walking one head at a time
// strides through the cache a row per key). Each (query, head) pair still gets exactly
// the operations of computing it alone: its dots through DotTile, its softmax over its own
// scores, and its value sum as one FMA chain per element in key order.
HWY_INLINE void AttendHeads(const AttentionArgs& a, size_t i, size_t h0, size_t h1, float* s,
                            float* acc) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t hd = a.head_dim;
  const size_t group = a.n_heads / a.n_kv_heads;
  const size_t end = a.pos0 + i + 1;  // Keys [first, end): the window ends at the query.
  size_t first = a.window > 0 && end > a.window ? end - a.window : 0;
  if (a.chunk > 0) first = std::max(first, (end - 1) / a.chunk * a.chunk);
  const size_t len = end - first;
  const size_t kv_stride = a.n_kv_heads * hd;
  const size_t heads = h1 - h0;
  // Scores: s[(h - h0) * len + j] for key first + j.
  for (size_t j = 0; j < len; ++j) {
    const float* kj = a.k + (first + j) * kv_stride;
    for (size_t h = h0; h < h1; ++h) {
      const float* xs[1] = {a.q + (i * a.n_heads + h) * hd};
      const std::byte* ks[1] = {reinterpret_cast<const std::byte*>(kj + (h / group) * hd)};
      DotTile<DType::kF32, 1, 1>(ks, xs, hd, s + (h - h0) * len + j, 0);
    }
  }
  const hn::CappedTag<float, 1> d1;
  const size_t hv = hd / N * N;
  std::fill(acc, acc + heads * hd, 0.0f);
  float inv[kMaxHeadsPerUnit];
  for (size_t g = 0; g < heads; ++g) {
    float* sg = s + g * len;
    for (size_t j = 0; j < len; ++j) sg[j] *= a.scale;
    inv[g] = 1.0f / ExpShifted(sg, len, a.sinks != nullptr ? a.sinks + h0 + g : nullptr);
  }
  // acc_h = sum_j p_hj v_jh, in key order.
  for (size_t j = 0; j < len; ++j) {
    const float* vrow = a.v + (first + j) * kv_stride;
    for (size_t h = h0; h < h1; ++h) {
      const size_t g = h - h0;
      const float* vj = vrow + (h / group) * hd;
      float* ag = acc + g * hd;
      const float pj = s[g * len + j];
      const VF p = hn::Set(df, pj);
      size_t c = 0;
      for (; c < hv; c += N)
        hn::StoreU(hn::MulAdd(p, hn::LoadU(df, vj + c), hn::LoadU(df, ag + c)), df, ag + c);
      for (; c < hd; ++c) {
        ag[c] = hn::GetLane(hn::MulAdd(hn::Set(d1, pj), hn::Set(d1, vj[c]), hn::Set(d1, ag[c])));
      }
    }
  }
  for (size_t h = h0; h < h1; ++h) {
    const size_t g = h - h0;
    float* o = a.out + (i * a.n_heads + h) * hd;
    for (size_t c = 0; c < hd; ++c) o[c] = acc[g * hd + c] * inv[g];
  }
}

void AttentionImpl(const float* q, size_t n_q, size_t pos0, const float* k, const float* v,
                   size_t n_heads, size_t n_kv_heads, size_t head_dim, float scale, float* out,
                   const float* sinks, size_t window, size_t chunk, ThreadPool* pool) {
  const AttentionArgs a{q,        n_q,   pos0, k,     v,      n_heads, n_kv_heads,
                        head_dim, scale, out,  sinks, window, chunk};
  // Units are (query, group of heads): a few per thread when there are few queries
  // (decode), whole queries otherwise.
  const size_t threads = static_cast<size_t>(pool->size());
  const size_t want = std::max<size_t>(1, (2 * threads + n_q - 1) / n_q);
  const size_t groups =
      std::min(n_heads, std::max(want, (n_heads + kMaxHeadsPerUnit - 1) / kMaxHeadsPerUnit));
  const size_t per_group = (n_heads + groups - 1) / groups;
  const size_t n_groups = (n_heads + per_group - 1) / per_group;
  const size_t units = n_q * n_groups;
  const auto run = [&](size_t b, size_t e, int) {
    thread_local std::vector<float> scratch;
    const size_t need = per_group * (a.pos0 + a.n_q + a.head_dim);
    if (scratch.size() < need) scratch.resize(need);
    for (size_t u = b; u < e; ++u) {
      const size_t i = u / n_groups, h0 = (u % n_groups) * per_group;
      AttendHeads(a, i, h0, std::min(n_heads, h0 + per_group), scratch.data(),
                  scratch.data() + per_group * (a.pos0 + i + 1));
    }
  };
  const size_t work = n_q * n_heads * (a.pos0 + a.n_q) * a.head_dim;
  if (work < (size_t{1} << 15) || threads == 1) {
    run(0, units, 0);
  } else {
    pool->ParallelForDynamic(units, 1, run);
  }
}

}  // namespace moex::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moex::kernels {

HWY_EXPORT(AttentionImpl);

void Attention(const float* q, int64_t n_q, int64_t pos0, const float* k, const float* v,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out,
               ThreadPool& pool, const AttentionExtras& extras) {
  Check(n_q >= 0 && pos0 >= 0 && head_dim > 0, "Attention: bad shape");
  Check(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "Attention: ", n_heads,
        " heads is not a multiple of ", n_kv_heads, " kv heads");
  Check(extras.window >= 0 && extras.chunk >= 0, "Attention: negative window or chunk");
  if (n_q == 0) return;
  HWY_DYNAMIC_DISPATCH(AttentionImpl)
  (q, n_q, pos0, k, v, n_heads, n_kv_heads, head_dim, scale, out, extras.sinks,
   static_cast<size_t>(extras.window), static_cast<size_t>(extras.chunk), &pool);
}

void Attention(const float* q, int64_t n_q, int64_t pos0, const float* k, const float* v,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out,
               const AttentionExtras& extras) {
  Attention(q, n_q, pos0, k, v, n_heads, n_kv_heads, head_dim, scale, out, ThreadPool::Global(),
            extras);
}

}  // namespace moex::kernels
#endif  // HWY_ONCE

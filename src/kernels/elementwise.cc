// Row-wise and element-wise kernels: RmsNorm, LayerNorm, RopeNeox, Softmax, SiluMul, ToF32.
#include "kernels/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/elementwise.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/simd-inl.h"

#include <cmath>

#include "core/thread_pool.h"
#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace moex::kernels::HWY_NAMESPACE {

// Loads x[i, i + rest) zero-padded to a full vector.
HWY_INLINE VF LoadPadded(DF df, const float* x, size_t rest) {
  HWY_ALIGN float pad[kMaxLanes] = {};
  std::memcpy(pad, x, rest * sizeof(float));
  return hn::Load(df, pad);
}

HWY_INLINE void StorePartial(DF df, VF v, size_t rest, float* dst) {
  HWY_ALIGN float pad[kMaxLanes];
  hn::Store(v, df, pad);
  std::memcpy(dst, pad, rest * sizeof(float));
}

HWY_INLINE void RmsNormRow(const float* x, const float* weight, size_t dim, float eps, float* out) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF ss = hn::Zero(df);
  size_t i = 0;
  for (; i + N <= dim; i += N) {
    const VF v = hn::LoadU(df, x + i);
    ss = hn::MulAdd(v, v, ss);
  }
  if (i < dim) {
    const VF v = LoadPadded(df, x + i, dim - i);
    ss = hn::MulAdd(v, v, ss);
  }
  const float mean = hn::GetLane(hn::SumOfLanes(df, ss)) / static_cast<float>(dim);
  const VF scale = hn::Set(df, 1.0f / std::sqrt(mean + eps));
  for (i = 0; i + N <= dim; i += N) {
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + i), scale), hn::LoadU(df, weight + i)), df,
               out + i);
  }
  if (i < dim) {
    const size_t rest = dim - i;
    const VF v =
        hn::Mul(hn::Mul(LoadPadded(df, x + i, rest), scale), LoadPadded(df, weight + i, rest));
    StorePartial(df, v, rest, out + i);
  }
}

void RmsNormImpl(const float* x, const float* weight, size_t n, size_t dim, float eps, float* out) {
  const auto run = [&](size_t b, size_t e, int) {
    for (size_t t = b; t < e; ++t) RmsNormRow(x + t * dim, weight, dim, eps, out + t * dim);
  };
  if (n * dim < (size_t{1} << 16)) {
    run(0, n, 0);
  } else {
    ThreadPool::Global().ParallelFor(n, 1, run);
  }
}

// Two passes in f32, as torch's LayerNorm: the mean, then the mean squared deviation.
HWY_INLINE void LayerNormRow(const float* x, const float* weight, const float* bias, size_t dim,
                             float eps, float* out) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF sum = hn::Zero(df);
  size_t i = 0;
  for (; i + N <= dim; i += N) sum = hn::Add(sum, hn::LoadU(df, x + i));
  if (i < dim) sum = hn::Add(sum, LoadPadded(df, x + i, dim - i));
  const float mean = hn::GetLane(hn::SumOfLanes(df, sum)) / static_cast<float>(dim);
  const VF vmean = hn::Set(df, mean);
  VF ss = hn::Zero(df);
  for (i = 0; i + N <= dim; i += N) {
    const VF c = hn::Sub(hn::LoadU(df, x + i), vmean);
    ss = hn::MulAdd(c, c, ss);
  }
  if (i < dim) {
    // Padding lanes would contribute mean^2: zero them.
    const VF c = hn::IfThenElseZero(hn::FirstN(df, dim - i),
                                    hn::Sub(LoadPadded(df, x + i, dim - i), vmean));
    ss = hn::MulAdd(c, c, ss);
  }
  const float var = hn::GetLane(hn::SumOfLanes(df, ss)) / static_cast<float>(dim);
  const VF scale = hn::Set(df, 1.0f / std::sqrt(var + eps));
  for (i = 0; i + N <= dim; i += N) {
    const VF c = hn::Mul(hn::Sub(hn::LoadU(df, x + i), vmean), scale);
    hn::StoreU(hn::MulAdd(c, hn::LoadU(df, weight + i), hn::LoadU(df, bias + i)), df, out + i);
  }
  if (i < dim) {
    const size_t rest = dim - i;
    const VF c = hn::Mul(hn::Sub(LoadPadded(df, x + i, rest), vmean), scale);
    StorePartial(df, hn::MulAdd(c, LoadPadded(df, weight + i, rest), LoadPadded(df, bias + i, rest)),
                 rest, out + i);
  }
}

void LayerNormImpl(const float* x, const float* weight, const float* bias, size_t n, size_t dim,
                   float eps, float* out) {
  const auto run = [&](size_t b, size_t e, int) {
    for (size_t t = b; t < e; ++t)
      LayerNormRow(x + t * dim, weight, bias, dim, eps, out + t * dim);
  };
  if (n * dim < (size_t{1} << 16)) {
    run(0, n, 0);
  } else {
    ThreadPool::Global().ParallelFor(n, 1, run);
  }
}

void RopeNeoxImpl(float* x, size_t n_heads, size_t head_dim, const float* cos, const float* sin) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t half = head_dim / 2;
  for (size_t h = 0; h < n_heads; ++h) {
    float* a = x + h * head_dim;
    float* b = a + half;
    size_t i = 0;
    for (; i + N <= half; i += N) {
      const VF va = hn::LoadU(df, a + i), vb = hn::LoadU(df, b + i);
      const VF c = hn::LoadU(df, cos + i), s = hn::LoadU(df, sin + i);
      hn::StoreU(hn::Sub(hn::Mul(va, c), hn::Mul(vb, s)), df, a + i);
      hn::StoreU(hn::Add(hn::Mul(vb, c), hn::Mul(va, s)), df, b + i);
    }
    if (i < half) {
      const size_t rest = half - i;
      const VF va = LoadPadded(df, a + i, rest), vb = LoadPadded(df, b + i, rest);
      const VF c = LoadPadded(df, cos + i, rest), s = LoadPadded(df, sin + i, rest);
      StorePartial(df, hn::Sub(hn::Mul(va, c), hn::Mul(vb, s)), rest, a + i);
      StorePartial(df, hn::Add(hn::Mul(vb, c), hn::Mul(va, s)), rest, b + i);
    }
  }
}

void SoftmaxImpl(float* x, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  if (n == 0) return;
  float max = x[0];
  for (size_t i = 1; i < n; ++i) max = std::max(max, x[i]);
  const VF vmax = hn::Set(df, max);
  VF sum = hn::Zero(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const VF e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), vmax));
    hn::StoreU(e, df, x + i);
    sum = hn::Add(sum, e);
  }
  if (i < n) {
    // Padding lanes hold -inf - max, whose exp is 0.
    HWY_ALIGN float pad[kMaxLanes];
    for (size_t l = 0; l < kMaxLanes; ++l) pad[l] = -INFINITY;
    std::memcpy(pad, x + i, (n - i) * sizeof(float));
    const VF e = hn::Exp(df, hn::Sub(hn::Load(df, pad), vmax));
    StorePartial(df, e, n - i, x + i);
    sum = hn::Add(sum, hn::IfThenElseZero(hn::FirstN(df, n - i), e));
  }
  const VF inv = hn::Set(df, 1.0f / hn::GetLane(hn::SumOfLanes(df, sum)));
  for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), inv), df, x + i);
  if (i < n) StorePartial(df, hn::Mul(LoadPadded(df, x + i, n - i), inv), n - i, x + i);
}

void SiluMulImpl(float* gate, const float* up, size_t n) {
  SiluMulArray(gate, up, n);
}

template <DType kT>
void ToF32T(const std::byte* src, size_t n, float* dst) {
  const DF df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadW<kT>(df, src, i), df, dst + i);
  for (; i < n; ++i) dst[i] = LoadScalar<kT>(src, i);
}

void ToF32Impl(const std::byte* src, DType dtype, size_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      return ToF32T<DType::kF32>(src, n, dst);
    case DType::kF16:
      return ToF32T<DType::kF16>(src, n, dst);
    case DType::kBF16:
      return ToF32T<DType::kBF16>(src, n, dst);
    case DType::kQ8_0:
      return ToF32T<DType::kQ8_0>(src, n, dst);
    default:  // The other block formats: their scalar decoders.
      return ConvertToF32(src, dtype, static_cast<int64_t>(n), dst);
  }
}

}  // namespace moex::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moex::kernels {

HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(LayerNormImpl);
HWY_EXPORT(RopeNeoxImpl);
HWY_EXPORT(SoftmaxImpl);
HWY_EXPORT(SiluMulImpl);
HWY_EXPORT(ToF32Impl);

void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
  if (n <= 0 || dim <= 0) return;
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, weight, n, dim, eps, out);
}

void LayerNorm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim,
               float eps, float* out) {
  if (n <= 0 || dim <= 0) return;
  HWY_DYNAMIC_DISPATCH(LayerNormImpl)(x, weight, bias, n, dim, eps, out);
}

void RopeNeox(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin) {
  if (n_heads <= 0 || head_dim <= 0) return;
  HWY_DYNAMIC_DISPATCH(RopeNeoxImpl)(x, n_heads, head_dim, cos, sin);
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, n);
}

void SiluMul(float* gate, const float* up, int64_t n) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(SiluMulImpl)(gate, up, n);
}

void ToF32(const std::byte* src, DType dtype, int64_t n, float* dst) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(ToF32Impl)(src, dtype, n, dst);
}

}  // namespace moex::kernels
#endif  // HWY_ONCE

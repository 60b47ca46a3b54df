// Per-target building blocks shared by the kernels: weight loads that widen any dtype to
// f32 vectors, and the dot-product tile behind Linear and the expert gate/up projections.
// Every matrix kernel goes through DotTile so that a given output element always sees the
// same lane split over `in`, the same FMA order and the same horizontal reduction, whatever
// the tile shape it was computed in (the batch-invariance half of the determinism contract).
//
// Included once per Highway target (foreach_target.h), hence the toggle guard.
#if defined(MOEX_KERNELS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEX_KERNELS_SIMD_INL_H_
#undef MOEX_KERNELS_SIMD_INL_H_
#else
#define MOEX_KERNELS_SIMD_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace moex::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Largest vector any target uses, in floats (AVX-512); sizes stack buffers for tails.
constexpr size_t kMaxLanes = 16;

// The f16 at p, converted and broadcast to every lane (one broadcast and one vector
// conversion, cheaper than converting a scalar and broadcasting it).
HWY_INLINE VF BroadcastHalf(DF df, const std::byte* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  const hn::RebindToUnsigned<decltype(dh)> du;
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return hn::PromoteTo(df, hn::BitCast(dh, hn::Set(du, bits)));
}

// Scalar weight element `i` of a row, exactly as the vector loads produce it.
template <DType kT>
HWY_INLINE float LoadScalar(const std::byte* row, size_t i) {
  return ElementToF32(kT, row, i);
}

// Lanes(df) weights starting at element i of a row, widened to f32 (exactly). For Q8_0, i
// must be a multiple of Lanes(df), which always divides the 32-element block.
template <DType kT>
HWY_INLINE VF LoadW(DF df, const std::byte* row, size_t i) {
  if constexpr (kT == DType::kF32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + i);
  } else if constexpr (kT == DType::kBF16) {
    const hn::Rebind<hwy::bfloat16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(row) + i));
  } else if constexpr (kT == DType::kF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + i));
  } else {
    const hn::Rebind<int32_t, DF> di;
    const hn::Rebind<int8_t, DF> dq;
    const std::byte* block = row + (i / kQ8BlockSize) * kQ8BlockBytes;
    const auto q = hn::LoadU(dq, reinterpret_cast<const int8_t*>(block + 2) + i % kQ8BlockSize);
    return hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, q)), BroadcastHalf(df, block));
  }
}

// Widens elements [0, k) of a row to f32 in dst, zero-padded to a multiple of Lanes.
template <DType kT>
HWY_INLINE void WidenRow(const std::byte* row, size_t k, float* HWY_RESTRICT dst) {
  const DF df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= k; i += N) hn::StoreU(LoadW<kT>(df, row, i), df, dst + i);
  for (; i < k; ++i) dst[i] = LoadScalar<kT>(row, i);
  for (; i % N != 0; ++i) dst[i] = 0.0f;
}

// Bytes of `count` elements of a non-block dtype.
template <DType kT>
constexpr size_t ElemBytes() {
  return kT == DType::kF32 ? 4 : 2;
}

// out[t * ldo + r] = dot(w[r][0:k), x[t][0:k)) for r < R, t < T.
// Each dot keeps one vector accumulator: lane j sums elements j, j+N, j+2N, ... in order,
// with a zero-padded final vector, then one SumOfLanes. Q8_0 weights are dequantised
// exactly first, so a Q8_0 row gives the same bits as its f32 dequantisation.
// kPrefetch > 0 prefetches each row that many bytes ahead of its loads (rows walked one
// after another; prefetches past a row's end fetch the next row).
template <DType kT, size_t R, size_t T, size_t kPrefetch = 0>
HWY_INLINE void DotTile(const std::byte* const* HWY_RESTRICT w, const float* const* HWY_RESTRICT x,
                        size_t k, float* HWY_RESTRICT out, size_t ldo) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF acc[R][T];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (size_t t = 0; t < T; ++t) acc[r][t] = hn::Zero(df);
  }
  size_t i = 0;
  if constexpr (kT == DType::kQ8_0) {
    // k is a multiple of 32: no tail. The scale is decoded once per block and row.
    const hn::Rebind<int32_t, DF> di;
    const hn::Rebind<int8_t, DF> dq;
    for (; i < k; i += kQ8BlockSize) {
      const size_t b = (i / kQ8BlockSize) * kQ8BlockBytes;
      VF scale[R];
#pragma GCC unroll 8
      for (size_t r = 0; r < R; ++r) {
        if constexpr (kPrefetch > 0) hwy::Prefetch(w[r] + b + kPrefetch);
        scale[r] = BroadcastHalf(df, w[r] + b);
      }
      for (size_t j = 0; j < kQ8BlockSize; j += N) {
        VF xv[T];
#pragma GCC unroll 8
        for (size_t t = 0; t < T; ++t) xv[t] = hn::LoadU(df, x[t] + i + j);
#pragma GCC unroll 8
        for (size_t r = 0; r < R; ++r) {
          const auto q = hn::LoadU(dq, reinterpret_cast<const int8_t*>(w[r] + b + 2) + j);
          const VF wv = hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, q)), scale[r]);
#pragma GCC unroll 8
          for (size_t t = 0; t < T; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
        }
      }
    }
  } else {
    for (; i + N <= k; i += N) {
      VF xv[T];
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) xv[t] = hn::LoadU(df, x[t] + i);
#pragma GCC unroll 8
      for (size_t r = 0; r < R; ++r) {
        if constexpr (kPrefetch > 0) hwy::Prefetch(w[r] + i * ElemBytes<kT>() + kPrefetch);
        const VF wv = LoadW<kT>(df, w[r], i);
#pragma GCC unroll 8
        for (size_t t = 0; t < T; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
      }
    }
    if (i < k) {  // Zero-padded last vector (never reads past the row).
      const size_t rest = k - i;
      HWY_ALIGN float pad[kMaxLanes];
      VF xv[T];
      for (size_t t = 0; t < T; ++t) {
        std::memset(pad, 0, sizeof pad);
        std::memcpy(pad, x[t] + i, rest * sizeof(float));
        xv[t] = hn::Load(df, pad);
      }
      for (size_t r = 0; r < R; ++r) {
        HWY_ALIGN std::byte raw[kMaxLanes * 4] = {};
        std::memcpy(raw, w[r] + i * ElemBytes<kT>(), rest * ElemBytes<kT>());
        const VF wv = LoadW<kT>(df, raw, 0);
        for (size_t t = 0; t < T; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
      }
    }
  }
  for (size_t r = 0; r < R; ++r) {
    for (size_t t = 0; t < T; ++t) out[t * ldo + r] = hn::GetLane(hn::SumOfLanes(df, acc[r][t]));
  }
}

// DotTile with the token count t (1 <= t <= kMaxT) chosen at run time.
template <DType kT, size_t R, size_t kMaxT, size_t kPrefetch = 0>
HWY_INLINE void DotTileN(const std::byte* const* w, const float* const* x, size_t t, size_t k,
                         float* out, size_t ldo) {
  if constexpr (kMaxT > 1) {
    if (t < kMaxT) return DotTileN<kT, R, kMaxT - 1, kPrefetch>(w, x, t, k, out, ldo);
  }
  DotTile<kT, R, kMaxT, kPrefetch>(w, x, k, out, ldo);
}

// silu(g) * u on one vector. Lane-wise only, so an element's value never depends on its
// position in a vector (callers may split arrays anywhere).
HWY_INLINE VF SiluMulVec(DF df, VF g, VF u) {
  const VF one = hn::Set(df, 1.0f);
  // Highway's Exp has no overflow guard, so clamp its argument; below -88 silu(g) is
  // g e^g, under 1e-36 in magnitude, and is flushed to zero (NaN still propagates).
  const VF limit = hn::Set(df, 88.0f);
  const VF e = hn::Exp(df, hn::Min(hn::Neg(g), limit));
  const VF silu = hn::IfThenZeroElse(hn::Lt(g, hn::Neg(limit)), hn::Div(g, hn::Add(one, e)));
  return hn::Mul(silu, u);
}

// gate[i] = silu(gate[i]) * up[i]; the tail goes through a padded vector so that every
// element is computed by the same lane-wise code.
HWY_INLINE void SiluMulArray(float* HWY_RESTRICT gate, const float* HWY_RESTRICT up, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(SiluMulVec(df, hn::LoadU(df, gate + i), hn::LoadU(df, up + i)), df, gate + i);
  }
  if (i < n) {
    HWY_ALIGN float g[kMaxLanes] = {};
    HWY_ALIGN float u[kMaxLanes] = {};
    std::memcpy(g, gate + i, (n - i) * sizeof(float));
    std::memcpy(u, up + i, (n - i) * sizeof(float));
    hn::Store(SiluMulVec(df, hn::Load(df, g), hn::Load(df, u)), df, g);
    std::memcpy(gate + i, g, (n - i) * sizeof(float));
  }
}

// gpt-oss's clamped SwiGLU on one vector: g' = min(g, limit), u' = clamp(u, -limit, limit),
// (u' + 1) * g' * sigmoid(alpha g'), the sigmoid product as g' / (1 + exp(-alpha g'))
// with silu's overflow guard. Lane-wise only.
HWY_INLINE VF ClampedSwiGluVec(DF df, VF g, VF u, VF limit, VF alpha) {
  const VF one = hn::Set(df, 1.0f);
  const VF guard = hn::Set(df, 88.0f);
  g = hn::Min(g, limit);
  u = hn::Min(hn::Max(u, hn::Neg(limit)), limit);
  const VF ag = hn::Mul(alpha, g);
  const VF e = hn::Exp(df, hn::Min(hn::Neg(ag), guard));
  const VF glu = hn::IfThenZeroElse(hn::Lt(ag, hn::Neg(guard)), hn::Div(g, hn::Add(one, e)));
  return hn::Mul(hn::Add(u, one), glu);
}

// Before the activation: g[i] = gate_scale * g[i] + gate_bias[i * bias_stride], u likewise
// (scales of 1 and null biases leave them as they are). Stride 1: one bias per element;
// stride 0: one neuron's bias for its n tokens.
HWY_INLINE void ScaleAndBias(float* HWY_RESTRICT g, float* HWY_RESTRICT u, size_t n,
                             float gate_scale, float up_scale, const float* gate_bias,
                             const float* up_bias, size_t bias_stride) {
  if (gate_scale != 1.0f || up_scale != 1.0f) {
    for (size_t i = 0; i < n; ++i) g[i] *= gate_scale;
    for (size_t i = 0; i < n; ++i) u[i] *= up_scale;
  }
  if (gate_bias != nullptr) {
    for (size_t i = 0; i < n; ++i) g[i] += gate_bias[i * bias_stride];
    for (size_t i = 0; i < n; ++i) u[i] += up_bias[i * bias_stride];
  }
}

// One neuron's n tokens before the activation: its gate and up biases added to every token.
HWY_INLINE void NeuronScaleAndBias(float* HWY_RESTRICT g, float* HWY_RESTRICT u, size_t n,
                                   float gate_scale, float up_scale, const float* gate_bias,
                                   const float* up_bias, size_t neuron) {
  ScaleAndBias(g, u, n, gate_scale, up_scale,
               gate_bias != nullptr ? gate_bias + neuron : nullptr,
               up_bias != nullptr ? up_bias + neuron : nullptr, 0);
}

// gate[i] = act(gate[i] (+ gate_bias[i]), up[i] (+ up_bias[i])), i < n (biases may be null;
// the bias adds are plain f32 adds, as torch's x @ W + b). With scales other than 1 (llama.cpp's
// per-expert .scale), gate and up are multiplied by them first. The tail goes through a
// padded vector, as SiluMulArray.
HWY_INLINE void GatedActArray(float limit, float alpha, float* HWY_RESTRICT gate,
                              float* HWY_RESTRICT up, size_t n, const float* gate_bias,
                              const float* up_bias, float gate_scale = 1.0f,
                              float up_scale = 1.0f) {
  ScaleAndBias(gate, up, n, gate_scale, up_scale, gate_bias, up_bias, 1);
  if (limit <= 0.0f) return SiluMulArray(gate, up, n);
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF vl = hn::Set(df, limit), va = hn::Set(df, alpha);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(ClampedSwiGluVec(df, hn::LoadU(df, gate + i), hn::LoadU(df, up + i), vl, va), df,
               gate + i);
  }
  if (i < n) {
    HWY_ALIGN float g[kMaxLanes] = {};
    HWY_ALIGN float u[kMaxLanes] = {};
    std::memcpy(g, gate + i, (n - i) * sizeof(float));
    std::memcpy(u, up + i, (n - i) * sizeof(float));
    hn::Store(ClampedSwiGluVec(df, hn::Load(df, g), hn::Load(df, u), vl, va), df, g);
    std::memcpy(gate + i, g, (n - i) * sizeof(float));
  }
}

}  // namespace moex::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOEX_KERNELS_SIMD_INL_H_

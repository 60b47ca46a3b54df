// ExpertFfn for routed experts in GGML block formats (q8_0, q4_K, q6_K, mxfp4, ...), on the
// record groups of model/expert_layout.h, reading the checkpoint's blocks directly (no f32
// copy of the weights). Gate/up and down may be different formats (Q4_K_M's q4_K with q6_K):
// each format has a gate/up and a down kernel, and a job runs the pair its layer names
// (ExpertEncoding). Also Linear on block-format weights (QuantLinear).
//
// Two activation precisions (kernels/activation_precision.h, docs/kernels.md):
//  * int8: integer dot products of int8_dot-inl.h, x and h rounded to int8 once per job;
//  * f32: a block is decoded to f32 in registers (fused: codes times x, one scale per
//    sub-block; SIMD decoders for the rest, or core/quant_dequantize.cc's scalar ones into
//    an L1 buffer) and dotted with the f32 activations.
// Either way:
//   gate/up: h[t, i] = silu(dot(gate_i, x_t)) * dot(up_i, x_t), one dot per row over d;
//   down:    y[t, j] += dot(down block (j, group), h[t, group]) for each record group in
//            neuron order: one scalar addition per (row, group).
// Every dot has a fixed lane split and reduction, so the bits of y[t, :] depend neither on
// the number of tokens, nor the thread count or work split, nor on how a job's neuron
// range is cut into chunks of whole groups (the lossless guarantee rests on this).
#include "kernels/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quant_expert_ffn.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/int8_dot-inl.h"
#include "kernels/simd-inl.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/quant_format.h"
#include "core/thread_pool.h"
#include "kernels/activation_precision.h"
#include "kernels/ops.h"
#include "kernels/partition.h"
#include "kernels/quant_expert_ffn.h"

HWY_BEFORE_NAMESPACE();
namespace moex::kernels::HWY_NAMESPACE {

namespace quant {

using DI = hn::Rebind<int32_t, DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using DI8 = hn::Rebind<int8_t, DF>;

// The f16 at p as f32, with the CPU's conversion (F16ToF32 is a software routine, too slow
// once per block); exact either way.
HWY_INLINE float Half(const uint8_t* p) {
  return hn::GetLane(BroadcastHalf(DF(), reinterpret_cast<const std::byte*>(p)));
}

// 2^(e - 128) for an E8M0 byte e (MXFP4's block scale, times the doubled FP4 values), built
// from its bits: normal for e >= 2, subnormal below (what std::ldexp gives).
HWY_INLINE float E8M0Half(uint8_t e) {
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00400000u >> (2 - e);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// N bytes at p widened to int32 lanes.
HWY_INLINE hn::Vec<DI> Bytes(const uint8_t* p) {
  const DI di;
  return hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DI>(), hn::LoadU(DU8(), p)));
}

// Generic decoder: the scalar reference of core/quant_dequantize.cc, `blocks` whole blocks.
template <QuantFormat F>
HWY_INLINE void DecodeBlocks(const uint8_t* b, size_t blocks, float* HWY_RESTRICT out) {
  Dequantize(F, b, static_cast<int64_t>(blocks) * Info(F).block_elems, out);
}

// SIMD decoders: the same arithmetic as the scalar ones (scale first, then times the code),
// so the same floats.
template <>
HWY_INLINE void DecodeBlocks<QuantFormat::kQ8_0>(const uint8_t* b, size_t blocks,
                                                 float* HWY_RESTRICT out) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  for (size_t k = 0; k < blocks; ++k, b += 34, out += 32) {
    const VF d = hn::Set(df, Half(b));
    for (size_t j = 0; j < 32; j += N) {
      const auto q =
          hn::PromoteTo(di, hn::LoadU(DI8(), reinterpret_cast<const int8_t*>(b + 2 + j)));
      hn::StoreU(hn::Mul(d, hn::ConvertTo(df, q)), df, out + j);
    }
  }
}

template <>
HWY_INLINE void DecodeBlocks<QuantFormat::kQ4_0>(const uint8_t* b, size_t blocks,
                                                 float* HWY_RESTRICT out) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const auto mask = hn::Set(di, 0xf), eight = hn::Set(di, 8);
  for (size_t k = 0; k < blocks; ++k, b += 18, out += 32) {
    const VF d = hn::Set(df, Half(b));
    for (size_t j = 0; j < 16; j += N) {
      const auto q = Bytes(b + 2 + j);
      const auto lo = hn::Sub(hn::And(q, mask), eight);
      const auto hi = hn::Sub(hn::ShiftRight<4>(q), eight);
      hn::StoreU(hn::Mul(d, hn::ConvertTo(df, lo)), df, out + j);
      hn::StoreU(hn::Mul(d, hn::ConvertTo(df, hi)), df, out + 16 + j);
    }
  }
}

template <>
HWY_INLINE void DecodeBlocks<QuantFormat::kMXFP4>(const uint8_t* b, size_t blocks,
                                                  float* HWY_RESTRICT out) {
  // FP4 E2M1 values times two, indexed by the nibble (as core's kE2M1Doubled).
  HWY_ALIGN static constexpr float kLevels[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                                  0, -1, -2, -3, -4, -6, -8, -12};
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const auto mask = hn::Set(di, 0xf);
  for (size_t k = 0; k < blocks; ++k, b += 17, out += 32) {
    const VF d = hn::Set(df, E8M0Half(b[0]));
    for (size_t j = 0; j < 16; j += N) {
      const auto q = Bytes(b + 1 + j);
      const VF lo = hn::GatherIndex(df, kLevels, hn::And(q, mask));
      const VF hi = hn::GatherIndex(df, kLevels, hn::ShiftRight<4>(q));
      hn::StoreU(hn::Mul(d, lo), df, out + j);
      hn::StoreU(hn::Mul(d, hi), df, out + 16 + j);
    }
  }
}

// Q4_K/Q5_K's 6-bit scale and min of sub-block j (as core's ScaleMinK4).
HWY_INLINE void ScaleMinK4(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K (kBits 4) and Q5_K (kBits 5): y = d * sc * q - dmin * m per sub-block of 32.
template <int kBits>
HWY_INLINE void DecodeK45(const uint8_t* b, size_t blocks, float* HWY_RESTRICT out) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const auto mask = hn::Set(di, 0xf), one = hn::Set(di, 1);
  constexpr size_t kBytes = kBits == 4 ? 144 : 176;
  for (size_t k = 0; k < blocks; ++k, b += kBytes) {
    const float d = Half(b), dmin = Half(b + 2);
    const uint8_t* packed = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + (kBits == 4 ? 16 : 48);
    for (int j = 0; j < 8; j += 2, q += 32, out += 64) {
      int sc, m;
      ScaleMinK4(j, packed, &sc, &m);
      const VF d1 = hn::Set(df, d * static_cast<float>(sc));
      const VF m1 = hn::Set(df, dmin * static_cast<float>(m));
      ScaleMinK4(j + 1, packed, &sc, &m);
      const VF d2 = hn::Set(df, d * static_cast<float>(sc));
      const VF m2 = hn::Set(df, dmin * static_cast<float>(m));
      for (size_t l = 0; l < 32; l += N) {
        const auto v = Bytes(q + l);
        auto lo = hn::And(v, mask);
        auto hi = hn::ShiftRight<4>(v);
        if constexpr (kBits == 5) {
          const auto h = Bytes(qh + l);
          lo = hn::Or(lo, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, j), one)));
          hi = hn::Or(hi, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, j + 1), one)));
        }
        hn::StoreU(hn::Sub(hn::Mul(d1, hn::ConvertTo(df, lo)), m1), df, out + l);
        hn::StoreU(hn::Sub(hn::Mul(d2, hn::ConvertTo(df, hi)), m2), df, out + 32 + l);
      }
    }
  }
}

template <>
HWY_INLINE void DecodeBlocks<QuantFormat::kQ4_K>(const uint8_t* b, size_t blocks,
                                                 float* HWY_RESTRICT out) {
  DecodeK45<4>(b, blocks, out);
}
template <>
HWY_INLINE void DecodeBlocks<QuantFormat::kQ5_K>(const uint8_t* b, size_t blocks,
                                                 float* HWY_RESTRICT out) {
  DecodeK45<5>(b, blocks, out);
}

template <>
HWY_INLINE void DecodeBlocks<QuantFormat::kQ6_K>(const uint8_t* b, size_t blocks,
                                                 float* HWY_RESTRICT out) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const auto mask = hn::Set(di, 0xf), three = hn::Set(di, 3), bias = hn::Set(di, 32);
  for (size_t k = 0; k < blocks; ++k, b += 210) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = Half(b + 208);
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, out += 128) {
      for (size_t l = 0; l < 32; l += N) {
        // N divides 16, so all lanes share the sub-block (l / 16) of each quarter.
        const size_t is = l / 16;
        const auto a = Bytes(ql + l), c = Bytes(ql + l + 32), h = Bytes(qh + l);
        const auto q1 =
            hn::Sub(hn::Or(hn::And(a, mask), hn::ShiftLeft<4>(hn::And(h, three))), bias);
        const auto q2 = hn::Sub(
            hn::Or(hn::And(c, mask), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(h), three))), bias);
        const auto q3 = hn::Sub(
            hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(h), three))),
            bias);
        const auto q4 = hn::Sub(
            hn::Or(hn::ShiftRight<4>(c), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<6>(h), three))),
            bias);
        hn::StoreU(hn::Mul(hn::Set(df, d * static_cast<float>(sc[is])), hn::ConvertTo(df, q1)), df,
                   out + l);
        hn::StoreU(hn::Mul(hn::Set(df, d * static_cast<float>(sc[is + 2])), hn::ConvertTo(df, q2)),
                   df, out + l + 32);
        hn::StoreU(hn::Mul(hn::Set(df, d * static_cast<float>(sc[is + 4])), hn::ConvertTo(df, q3)),
                   df, out + l + 64);
        hn::StoreU(hn::Mul(hn::Set(df, d * static_cast<float>(sc[is + 6])), hn::ConvertTo(df, q4)),
                   df, out + l + 96);
      }
    }
  }
}

// dot(w[0:k), x[0:k)), k a multiple of Lanes: four accumulators over consecutive vectors,
// combined as (a0 + a1) + (a2 + a3), then one SumOfLanes. A function of (w, x, k) alone.
HWY_INLINE float Dot(const float* HWY_RESTRICT w, const float* HWY_RESTRICT x, size_t k) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  size_t i = 0;
  for (; i + 4 * N <= k; i += 4 * N) {
    a0 = hn::MulAdd(hn::LoadU(df, w + i), hn::LoadU(df, x + i), a0);
    a1 = hn::MulAdd(hn::LoadU(df, w + i + N), hn::LoadU(df, x + i + N), a1);
    a2 = hn::MulAdd(hn::LoadU(df, w + i + 2 * N), hn::LoadU(df, x + i + 2 * N), a2);
    a3 = hn::MulAdd(hn::LoadU(df, w + i + 3 * N), hn::LoadU(df, x + i + 3 * N), a3);
  }
  for (; i < k; i += N) a0 = hn::MulAdd(hn::LoadU(df, w + i), hn::LoadU(df, x + i), a0);
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// --- Fused block dot products ------------------------------------------------------------
//
// For the formats below a block's weights are w = a_s * q + m_s per sub-block s (codes q,
// scale a_s, offset m_s), so dot(w, x) = sum_s a_s * (q_s . x_s) + m_s * sum(x_s): the codes
// are widened to f32 in registers and multiplied with x directly, the scale applied once
// per sub-block and the offset through precomputed sub-block sums of x. No decoded copy is
// written, and each block is read once for a tile of tokens. A token's result is the same
// sequence of operations whatever the tile, so the batch invariance holds.
template <QuantFormat F>
struct Fused {
  static constexpr bool kEnabled = false;
};

// 16-entry codebook lookup (iq4 levels, FP4 values) of 4-bit indices.
HWY_INLINE VF Lookup16(const float* table, hn::Vec<DI> idx) {
  const DF df;
#if MOEX_AVX512_TARGET
  return hn::TableLookupLanes(hn::LoadU(df, table), hn::IndicesFromVec(df, idx));
#else
  return hn::GatherIndex(df, table, idx);
#endif
}

// Codes of weights [i, i + N) of a 32-weight nibble block (byte j: weight j low, j + 16 high).
HWY_INLINE hn::Vec<DI> Nibbles32(const uint8_t* q, size_t i) {
  const DI di;
  return i < 16 ? hn::And(Bytes(q + i), hn::Set(di, 0xf)) : hn::ShiftRight<4>(Bytes(q + i - 16));
}

template <>
struct Fused<QuantFormat::kQ8_0> {
  static constexpr bool kEnabled = true, kHasMin = false;
  static constexpr size_t kBlock = 32, kBytes = 34, kSub = 32;
  static HWY_INLINE void Scales(const uint8_t* b, float* a, float*) { a[0] = Half(b); }
  static HWY_INLINE VF Codes(const uint8_t* b, size_t i) {
    return hn::ConvertTo(
        DF(), hn::PromoteTo(DI(), hn::LoadU(DI8(), reinterpret_cast<const int8_t*>(b + 2 + i))));
  }
};

template <>
struct Fused<QuantFormat::kQ4_0> {
  static constexpr bool kEnabled = true, kHasMin = false;
  static constexpr size_t kBlock = 32, kBytes = 18, kSub = 32;
  static HWY_INLINE void Scales(const uint8_t* b, float* a, float*) { a[0] = Half(b); }
  static HWY_INLINE VF Codes(const uint8_t* b, size_t i) {
    return hn::ConvertTo(DF(), hn::Sub(Nibbles32(b + 2, i), hn::Set(DI(), 8)));
  }
};

template <>
struct Fused<QuantFormat::kQ4_1> {
  static constexpr bool kEnabled = true, kHasMin = true;
  static constexpr size_t kBlock = 32, kBytes = 20, kSub = 32;
  static HWY_INLINE void Scales(const uint8_t* b, float* a, float* m) {
    a[0] = Half(b);
    m[0] = Half(b + 2);
  }
  static HWY_INLINE VF Codes(const uint8_t* b, size_t i) {
    return hn::ConvertTo(DF(), Nibbles32(b + 4, i));
  }
};

HWY_ALIGN constexpr float kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
HWY_ALIGN constexpr float kE2M1Doubled[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                              0, -1, -2, -3, -4, -6, -8, -12};

template <>
struct Fused<QuantFormat::kIQ4_NL> {
  static constexpr bool kEnabled = true, kHasMin = false;
  static constexpr size_t kBlock = 32, kBytes = 18, kSub = 32;
  static HWY_INLINE void Scales(const uint8_t* b, float* a, float*) { a[0] = Half(b); }
  static HWY_INLINE VF Codes(const uint8_t* b, size_t i) {
    return Lookup16(kIq4Levels, Nibbles32(b + 2, i));
  }
};

template <>
struct Fused<QuantFormat::kMXFP4> {
  static constexpr bool kEnabled = true, kHasMin = false;
  static constexpr size_t kBlock = 32, kBytes = 17, kSub = 32;
  static HWY_INLINE void Scales(const uint8_t* b, float* a, float*) { a[0] = E8M0Half(b[0]); }
  static HWY_INLINE VF Codes(const uint8_t* b, size_t i) {
    return Lookup16(kE2M1Doubled, Nibbles32(b + 1, i));
  }
};

// Q4_K / Q5_K: eight sub-blocks of 32, w = d*sc*q - dmin*m.
template <int kBits>
struct FusedK45 {
  static constexpr bool kEnabled = true, kHasMin = true;
  static constexpr size_t kBlock = 256, kBytes = kBits == 4 ? 144 : 176, kSub = 32;
  static HWY_INLINE void Scales(const uint8_t* b, float* a, float* m) {
    const float d = Half(b), dmin = Half(b + 2);
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      ScaleMinK4(j, b + 4, &sc, &mn);
      a[j] = d * static_cast<float>(sc);
      m[j] = -(dmin * static_cast<float>(mn));
    }
  }
  static HWY_INLINE VF Codes(const uint8_t* b, size_t i) {
    const DI di;
    const size_t s = i / 32, l = i % 32;
    const uint8_t* q = b + (kBits == 4 ? 16 : 48) + (s / 2) * 32 + l;
    auto v = (s & 1) ? hn::ShiftRight<4>(Bytes(q)) : hn::And(Bytes(q), hn::Set(di, 0xf));
    if constexpr (kBits == 5) {
      const auto h = Bytes(b + 16 + l);
      v = hn::Or(
          v, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, static_cast<int>(s)), hn::Set(di, 1))));
    }
    return hn::ConvertTo(DF(), v);
  }
};
template <>
struct Fused<QuantFormat::kQ4_K> : FusedK45<4> {};
template <>
struct Fused<QuantFormat::kQ5_K> : FusedK45<5> {};

template <>
struct Fused<QuantFormat::kQ6_K> {
  static constexpr bool kEnabled = true, kHasMin = false;
  static constexpr size_t kBlock = 256, kBytes = 210, kSub = 16;
  static HWY_INLINE void Scales(const uint8_t* b, float* a, float*) {
    const float d = Half(b + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    // Sub-block s of 16 weights uses sc[s]: in half h, quarter p, weights l + 32p with
    // l / 16 = is take sc[8h + is + 2p] = sc[s].
    for (int s = 0; s < 16; ++s) a[s] = d * static_cast<float>(sc[s]);
  }
  static HWY_INLINE VF Codes(const uint8_t* b, size_t i) {
    const DI di;
    const size_t half = i / 128, p = (i % 128) / 32, l = i % 32;
    const auto lo = Bytes(b + half * 64 + l + (p & 1) * 32);
    const auto nib = p >= 2 ? hn::ShiftRight<4>(lo) : hn::And(lo, hn::Set(di, 0xf));
    const auto hi =
        hn::And(hn::ShiftRightSame(Bytes(b + 128 + half * 32 + l), static_cast<int>(2 * p)),
                hn::Set(di, 3));
    return hn::ConvertTo(DF(), hn::Sub(hn::Or(nib, hn::ShiftLeft<4>(hi)), hn::Set(di, 32)));
  }
};

template <>
struct Fused<QuantFormat::kIQ4_XS> {
  static constexpr bool kEnabled = true, kHasMin = false;
  static constexpr size_t kBlock = 256, kBytes = 136, kSub = 32;
  static HWY_INLINE void Scales(const uint8_t* b, float* a, float*) {
    const float d = Half(b);
    const unsigned scales_h = static_cast<unsigned>(b[2] | (b[3] << 8));
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) |
                     static_cast<int>(((scales_h >> (2 * ib)) & 3) << 4);
      a[ib] = d * static_cast<float>(ls - 32);
    }
  }
  static HWY_INLINE VF Codes(const uint8_t* b, size_t i) {
    return Lookup16(kIq4Levels, Nibbles32(b + 8 + (i / 32) * 16, i % 32));
  }
};

// Sums of v over consecutive runs of `sub` elements, in order (the sub-block sums of x or h
// a format with offsets needs); out[k] covers v[k*sub, (k+1)*sub).
HWY_INLINE void SubSums(const float* v, size_t count, size_t sub, float* out) {
  for (size_t k = 0; k < count / sub; ++k) {
    float s = 0;
    for (size_t i = 0; i < sub; ++i) s += v[k * sub + i];
    out[k] = s;
  }
}

// For R rows (blocks at the same position of R weight rows) and T tokens: acc[r*T + t] +=
// sum over the block's sub-blocks of a_rs * (q_rs . x_t), corr[r*T + t] += m_rs * xs_t[s].
// x[t] and xs[t] point at the block's first weight and sub-block; a and m hold each row's
// sub-block scales and offsets (a[r*kSubs + s]); code(r, i) gives row r's f32 codes of
// weights [i, i + N) (from the block, or widened once beforehand: the same values). Every
// (row, token) pair gets the same operations whatever R and T, so the same bits; the rows
// share each token's x loads.
template <QuantFormat F, size_t R, size_t T, class CodeFn>
HWY_INLINE void BlockDotWith(const float* a, const float* m, const CodeFn& code,
                             const float* const* x, const float* const* xs, VF* acc, float* corr) {
  using Q = Fused<F>;
  const DF df;
  constexpr size_t N = hn::MaxLanes(DF());
  constexpr size_t kSubs = Q::kBlock / Q::kSub;
  // Fully unrolled (sub-block and lane offsets become constants, so the codes' nibble and
  // bit selections are resolved at compile time).
#pragma GCC unroll 16
  for (size_t s = 0; s < kSubs; ++s) {
    VF qx[R * T];
#pragma GCC unroll 8
    for (size_t k = 0; k < R * T; ++k) qx[k] = hn::Zero(df);
#pragma GCC unroll 32
    for (size_t i = s * Q::kSub; i < (s + 1) * Q::kSub; i += N) {
      VF xv[T];
#pragma GCC unroll 4
      for (size_t t = 0; t < T; ++t) xv[t] = hn::LoadU(df, x[t] + i);
#pragma GCC unroll 2
      for (size_t r = 0; r < R; ++r) {
        const VF q = code(r, i);
#pragma GCC unroll 4
        for (size_t t = 0; t < T; ++t) qx[r * T + t] = hn::MulAdd(q, xv[t], qx[r * T + t]);
      }
    }
#pragma GCC unroll 2
    for (size_t r = 0; r < R; ++r) {
      const VF av = hn::Set(df, a[r * kSubs + s]);
#pragma GCC unroll 4
      for (size_t t = 0; t < T; ++t) acc[r * T + t] = hn::MulAdd(av, qx[r * T + t], acc[r * T + t]);
      if constexpr (Q::kHasMin) {
        // An explicit fma, not `corr += m * xs`: GCC contracts that into an fma only where it
        // stays scalar (or is vectorised whole), and its SLP vectoriser packs these scalars
        // differently for each R * T (under -march=native: fused for one token, multiplied
        // then added for two or more), so a token's bits depended on its tile.
#pragma GCC unroll 4
        for (size_t t = 0; t < T; ++t)
          corr[r * T + t] = std::fma(m[r * kSubs + s], xs[t][s], corr[r * T + t]);
      }
    }
  }
}

template <QuantFormat F, size_t R, size_t T>
HWY_INLINE void BlockDot(const uint8_t* const* b, const float* const* x, const float* const* xs,
                         VF* acc, float* corr) {
  using Q = Fused<F>;
  constexpr size_t kSubs = Q::kBlock / Q::kSub;
  float a[R * kSubs], m[R * kSubs];
  for (size_t r = 0; r < R; ++r) Q::Scales(b[r], a + r * kSubs, m + r * kSubs);
  BlockDotWith<F, R, T>(
      a, m, [b](size_t r, size_t i) { return Q::Codes(b[r], i); }, x, xs, acc, corr);
}

// out[r * ldo + t] = dot(blocks of row r, x[t]) over `blocks` consecutive blocks per row.
template <QuantFormat F, size_t R, size_t T>
HWY_INLINE void BlocksDot(const uint8_t* const* rows, size_t blocks, const float* const* x,
                          const float* const* xs, float* out, size_t ldo) {
  using Q = Fused<F>;
  const DF df;
  VF acc[R * T];
  float corr[R * T];
  const float* xb[T];
  const float* xsb[T];
  const uint8_t* b[R];
  for (size_t k = 0; k < R * T; ++k) {
    acc[k] = hn::Zero(df);
    corr[k] = 0;
  }
  constexpr size_t kSubs = Q::kBlock / Q::kSub;
  for (size_t k = 0; k < blocks; ++k) {
    for (size_t t = 0; t < T; ++t) {
      xb[t] = x[t] + k * Q::kBlock;
      xsb[t] = Q::kHasMin ? xs[t] + k * kSubs : nullptr;
    }
    for (size_t r = 0; r < R; ++r) b[r] = rows[r] + k * Q::kBytes;
    BlockDot<F, R, T>(b, xb, xsb, acc, corr);
  }
  for (size_t r = 0; r < R; ++r)
    for (size_t t = 0; t < T; ++t)
      out[r * ldo + t] = hn::GetLane(hn::SumOfLanes(df, acc[r * T + t])) + corr[r * T + t];
}

// BlockDotWith for T tokens whose accumulators live in memory: row r's token t at
// acc[r * lda + t * N], corr[r * ldc + t]; codes of row r at codes[r * kBlock].
template <QuantFormat F, size_t R, size_t T>
HWY_INLINE void BlockDotCodesTile(const float* a, const float* m, const float* codes,
                                  const float* const* x, const float* const* xs, float* acc,
                                  size_t lda, float* corr, size_t ldc) {
  const DF df;
  constexpr size_t N = hn::MaxLanes(DF());
  constexpr size_t kBlock = Fused<F>::kBlock;
  VF at[R * T];
  float ct[R * T];
  for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (size_t t = 0; t < T; ++t) {
      at[r * T + t] = hn::LoadU(df, acc + r * lda + t * N);
      ct[r * T + t] = corr[r * ldc + t];
    }
  }
  BlockDotWith<F, R, T>(
      a, m, [codes, df](size_t r, size_t i) { return hn::LoadU(df, codes + r * kBlock + i); }, x,
      xs, at, ct);
  for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (size_t t = 0; t < T; ++t) {
      hn::StoreU(at[r * T + t], df, acc + r * lda + t * N);
      corr[r * ldc + t] = ct[r * T + t];
    }
  }
}

// One block position of R rows for n tokens with accumulators in memory (acc[r * n * N +
// t * N], corr[r * n + t]): each row's codes are widened once and reused by every tile.
template <QuantFormat F, size_t R>
HWY_INLINE void BlockDotMany(const uint8_t* const* b, size_t n, const float* const* x,
                             const float* const* xs, float* acc, float* corr,
                             float* HWY_RESTRICT codes) {
  using Q = Fused<F>;
  const DF df;
  constexpr size_t N = hn::MaxLanes(DF());
  constexpr size_t kSubs = Q::kBlock / Q::kSub;
  float a[R * kSubs], m[R * kSubs];
  for (size_t r = 0; r < R; ++r) {
    Q::Scales(b[r], a + r * kSubs, m + r * kSubs);
#pragma GCC unroll 32
    for (size_t i = 0; i < Q::kBlock; i += N)
      hn::StoreU(Q::Codes(b[r], i), df, codes + r * Q::kBlock + i);
  }
  const size_t lda = n * N, ldc = n;
  size_t t = 0;
  for (; t + 4 <= n; t += 4)
    BlockDotCodesTile<F, R, 4>(a, m, codes, x + t, xs + t, acc + t * N, lda, corr + t, ldc);
  switch (n - t) {
    case 3:
      return BlockDotCodesTile<F, R, 3>(a, m, codes, x + t, xs + t, acc + t * N, lda, corr + t,
                                        ldc);
    case 2:
      return BlockDotCodesTile<F, R, 2>(a, m, codes, x + t, xs + t, acc + t * N, lda, corr + t,
                                        ldc);
    case 1:
      return BlockDotCodesTile<F, R, 1>(a, m, codes, x + t, xs + t, acc + t * N, lda, corr + t,
                                        ldc);
    default:
      return;
  }
}

// out[r * n + t] = dot(row r, x[t]) for R rows of `blocks` blocks and n tokens: tiles of up
// to kFusedTokens straight from the blocks, or, for more tokens, codes widened once per
// block (BlockDotMany). Every path gives a (row, token) the same operations, so the result
// depends neither on n nor on R.
constexpr size_t kFusedTokens = 4;
template <QuantFormat F, size_t R>
HWY_INLINE void BlocksDotN(const uint8_t* const* rows, size_t blocks, size_t n,
                           const float* const* x, const float* const* xs, float* out) {
  if (n > 2 * kFusedTokens) {
    using Q = Fused<F>;
    const DF df;
    constexpr size_t N = hn::MaxLanes(DF());
    constexpr size_t kSubs = Q::kBlock / Q::kSub;
    thread_local std::vector<float> scratch;
    const size_t need = R * (n * N + n + Q::kBlock);
    if (scratch.size() < need) scratch.resize(need);
    float* acc = scratch.data();
    float* corr = acc + R * n * N;
    float* codes = corr + R * n;
    std::fill(acc, acc + R * (n * N + n), 0.0f);
    thread_local std::vector<const float*> ptrs;
    if (ptrs.size() < 2 * n) ptrs.resize(2 * n);
    const uint8_t* b[R];
    for (size_t k = 0; k < blocks; ++k) {
      for (size_t t = 0; t < n; ++t) {
        ptrs[t] = x[t] + k * Q::kBlock;
        ptrs[n + t] = Q::kHasMin ? xs[t] + k * kSubs : nullptr;
      }
      for (size_t r = 0; r < R; ++r) b[r] = rows[r] + k * Q::kBytes;
      BlockDotMany<F, R>(b, n, ptrs.data(), ptrs.data() + n, acc, corr, codes);
    }
    for (size_t r = 0; r < R; ++r)
      for (size_t t = 0; t < n; ++t)
        out[r * n + t] =
            hn::GetLane(hn::SumOfLanes(df, hn::LoadU(df, acc + (r * n + t) * N))) + corr[r * n + t];
    return;
  }
  size_t t = 0;
  for (; t + 4 <= n; t += 4) BlocksDot<F, R, 4>(rows, blocks, x + t, xs + t, out + t, n);
  switch (n - t) {
    case 3:
      return BlocksDot<F, R, 3>(rows, blocks, x + t, xs + t, out + t, n);
    case 2:
      return BlocksDot<F, R, 2>(rows, blocks, x + t, xs + t, out + t, n);
    case 1:
      return BlocksDot<F, R, 1>(rows, blocks, x + t, xs + t, out + t, n);
    default:
      return;
  }
}

// Neurons whose gate/up dots are activated together (GateUp's int8 path).
constexpr size_t kActivateNeurons = 64;

// Rows of down blocks decoded at a time (contiguous in a record group).
constexpr size_t kDownRows = 16;

template <QuantFormat F>
constexpr size_t kBlockOf =
    F == QuantFormat::kQ2_K || F == QuantFormat::kQ3_K || F == QuantFormat::kQ4_K ||
            F == QuantFormat::kQ5_K || F == QuantFormat::kQ6_K || F == QuantFormat::kIQ4_XS
        ? 256
        : 32;

// Per-thread scratch, two independent buffers.
template <int kWhich>
float* Scratch(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

// Where the parts of a record group lie (model/expert_layout.h): G gate rows, G up rows,
// then d down rows of G neurons each (G / block size blocks per row), padded to
// group_bytes. With one format throughout, G is its block size and a down row one block.
struct Groups {
  size_t d = 0;               // d_model.
  size_t g = 0;               // Neurons per group.
  size_t group_bytes = 0;     // G * record bytes, padding included.
  size_t row_bytes = 0;       // One gate (or up) row: d weights.
  size_t down_row_bytes = 0;  // One down row's G weights.
  const uint8_t* Group(const ExpertJob& job, size_t group) const {
    return reinterpret_cast<const uint8_t*>(job.records) + group * group_bytes;
  }
  const uint8_t* DownRows(const ExpertJob& job, size_t group) const {
    return Group(job, group) + 2 * g * row_bytes;
  }
};

// h = act(scale * gate + bias, scale * up + bias) of neuron i for n tokens: g[t] gate,
// g[n + t] up.
HWY_INLINE void Activate(const ExpertJob& job, const ExpertActivation& act, size_t i, float* g,
                         size_t n) {
  NeuronScaleAndBias(g, g + n, n, job.gate_scale, job.up_scale, job.gate_bias, job.up_bias, i);
  GatedActArray(act.limit, act.alpha, g, g + n, n, nullptr, nullptr);
}

// Gate/up in format F for neurons [a, b) of a job: h[t * ldh + i] for t < n.
template <QuantFormat F>
HWY_INLINE void GateUpBody(const Groups& geo, const ExpertActivation& act, const ExpertJob& job,
                           const int8::Activations* xq, size_t a, size_t b, float* h, size_t ldh) {
  constexpr size_t kBlock = kBlockOf<F>;
  const size_t d = geo.d, n = static_cast<size_t>(job.n);
  if constexpr (int8::Kernel<F>::kEnabled) {
    if (xq != nullptr) {
      // Gate and up dots of up to kActivateNeurons neurons, then their activation at once
      // (lane-wise, so each neuron's h is what it would be alone).
      float* g = Scratch<0>(2 * n + 2 * n * kActivateNeurons);
      float* gu = g + 2 * n;
      std::vector<int8::Span> x(n);
      for (size_t t = 0; t < n; ++t) x[t] = xq->Row(t);
      for (size_t a0 = a; a0 < b; a0 += kActivateNeurons) {
        const size_t count = std::min(kActivateNeurons, b - a0);
        for (size_t i = a0; i < a0 + count; ++i) {
          const uint8_t* base = geo.Group(job, i / geo.g);
          const size_t in_group = i % geo.g;
          const uint8_t* rows[2] = {base + in_group * geo.row_bytes,
                                    base + (geo.g + in_group) * geo.row_bytes};
          int8::BlocksDotN<F, 2>(rows, d / kBlock, n, x.data(), g);
          for (size_t t = 0; t < n; ++t) {
            gu[t * 2 * count + (i - a0)] = g[t];
            gu[t * 2 * count + count + (i - a0)] = g[n + t];
          }
        }
        for (size_t t = 0; t < n; ++t) {
          float* gate = gu + t * 2 * count;
          GatedActArray(act.limit, act.alpha, gate, gate + count, count,
                        job.gate_bias ? job.gate_bias + a0 : nullptr,
                        job.up_bias ? job.up_bias + a0 : nullptr, job.gate_scale, job.up_scale);
          std::copy(gate, gate + count, h + t * ldh + a0);
        }
      }
      return;
    }
  }
  if constexpr (Fused<F>::kEnabled) {
    using Q = Fused<F>;
    const size_t subs = d / Q::kSub;
    float* xs_all = Scratch<0>(n * subs + 2 * n);
    float* g = xs_all + n * subs;
    std::vector<const float*> x(n), xs(n);
    for (size_t t = 0; t < n; ++t) {
      x[t] = job.x + t * d;
      xs[t] = xs_all + t * subs;
      if constexpr (Q::kHasMin) SubSums(x[t], d, Q::kSub, xs_all + t * subs);
    }
    for (size_t i = a; i < b; ++i) {
      const uint8_t* base = geo.Group(job, i / geo.g);
      const size_t in_group = i % geo.g;
      // Gate and up rows together (they share every x load): g[t] gate, g[n + t] up.
      const uint8_t* rows[2] = {base + in_group * geo.row_bytes,
                                base + (geo.g + in_group) * geo.row_bytes};
      BlocksDotN<F, 2>(rows, d / kBlock, n, x.data(), xs.data(), g);
      Activate(job, act, i, g, n);
      for (size_t t = 0; t < n; ++t) h[t * ldh + i] = g[t];
    }
  } else {
    float* w = Scratch<0>(2 * d);
    float* g = Scratch<1>(2 * n);
    for (size_t i = a; i < b; ++i) {
      const uint8_t* base = geo.Group(job, i / geo.g);
      const size_t in_group = i % geo.g;
      DecodeBlocks<F>(base + in_group * geo.row_bytes, d / kBlock, w);
      DecodeBlocks<F>(base + (geo.g + in_group) * geo.row_bytes, d / kBlock, w + d);
      for (size_t t = 0; t < n; ++t) {
        g[t] = Dot(w, job.x + t * d, d);
        g[n + t] = Dot(w + d, job.x + t * d, d);
      }
      Activate(job, act, i, g, n);
      for (size_t t = 0; t < n; ++t) h[t * ldh + i] = g[t];
    }
  }
}

// Down in format F, rows [c0, c1) of a job over all its m / G groups, in neuron order:
// y[t, j] += dot(down row j's G weights of the group, h[t, group]), one addition per group.
template <QuantFormat F>
HWY_INLINE void DownBody(const Groups& geo, const ExpertJob& job, const float* h,
                         const int8::Activations* hq, size_t ldh, size_t m, size_t c0, size_t c1) {
  constexpr size_t kBlock = kBlockOf<F>;
  const size_t d = geo.d, g = geo.g, n = static_cast<size_t>(job.n);
  const size_t row_blocks = g / kBlock;
  if constexpr (int8::Kernel<F>::kEnabled && int8::Kernel<F>::kBlock == 32) {
    // A down row's share of a group is a few 32-weight blocks: eight rows at a time.
    if (hq != nullptr) {
      // Up to four tokens share each block's decoded codes.
      for (size_t group = 0; group < m / g; ++group) {
        const uint8_t* down = geo.DownRows(job, group) + c0 * geo.down_row_bytes;
        for (size_t t = 0; t < n; t += 4) {
          const size_t tokens = std::min<size_t>(4, n - t);
          int8::Span x[4];
          float* y[4];
          for (size_t i = 0; i < tokens; ++i) {
            x[i] = hq->Row(t + i).Advance(group * g, hq->block());
            y[i] = job.y + (t + i) * d + c0;
          }
          using K = int8::Kernel<F>;
          const size_t rb = geo.down_row_bytes, rows = c1 - c0;
          switch (tokens) {
            case 4:
              K::template AddRows<4>(down, rb, rows, row_blocks, x, y);
              break;
            case 3:
              K::template AddRows<3>(down, rb, rows, row_blocks, x, y);
              break;
            case 2:
              K::template AddRows<2>(down, rb, rows, row_blocks, x, y);
              break;
            default:
              K::template AddRows<1>(down, rb, rows, row_blocks, x, y);
          }
        }
      }
      return;
    }
  }
  if constexpr (int8::Kernel<F>::kEnabled) {
    if (hq != nullptr) {
      float* val = Scratch<0>(2 * n);
      std::vector<int8::Span> hp(n);
      for (size_t group = 0; group < m / g; ++group) {
        for (size_t t = 0; t < n; ++t) hp[t] = hq->Row(t).Advance(group * g, hq->block());
        const uint8_t* down = geo.DownRows(job, group);
        size_t j = c0;
        for (; j + 2 <= c1; j += 2) {
          const uint8_t* rows[2] = {down + j * geo.down_row_bytes,
                                    down + (j + 1) * geo.down_row_bytes};
          int8::BlocksDotN<F, 2>(rows, row_blocks, n, hp.data(), val);
          for (size_t t = 0; t < n; ++t) {
            job.y[t * d + j] += val[t];
            job.y[t * d + j + 1] += val[n + t];
          }
        }
        if (j < c1) {
          const uint8_t* rows[1] = {down + j * geo.down_row_bytes};
          int8::BlocksDotN<F, 1>(rows, row_blocks, n, hp.data(), val);
          for (size_t t = 0; t < n; ++t) job.y[t * d + j] += val[t];
        }
      }
      return;
    }
  }
  if constexpr (Fused<F>::kEnabled) {
    using Q = Fused<F>;
    const size_t subs = g / Q::kSub;
    float* hs_all = Scratch<0>(n * subs + 2 * n);
    float* val = hs_all + n * subs;
    std::vector<const float*> hp(n), hs(n);
    for (size_t group = 0; group < m / g; ++group) {
      for (size_t t = 0; t < n; ++t) {
        hp[t] = h + t * ldh + group * g;
        hs[t] = hs_all + t * subs;
        if constexpr (Q::kHasMin) SubSums(hp[t], g, Q::kSub, hs_all + t * subs);
      }
      const uint8_t* down = geo.DownRows(job, group);
      size_t j = c0;
      for (; j + 2 <= c1; j += 2) {  // Two rows' blocks at a time, sharing the h loads.
        const uint8_t* rows[2] = {down + j * geo.down_row_bytes,
                                  down + (j + 1) * geo.down_row_bytes};
        BlocksDotN<F, 2>(rows, row_blocks, n, hp.data(), hs.data(), val);
        for (size_t t = 0; t < n; ++t) {
          job.y[t * d + j] += val[t];
          job.y[t * d + j + 1] += val[n + t];
        }
      }
      if (j < c1) {
        const uint8_t* rows[1] = {down + j * geo.down_row_bytes};
        BlocksDotN<F, 1>(rows, row_blocks, n, hp.data(), hs.data(), val);
        for (size_t t = 0; t < n; ++t) job.y[t * d + j] += val[t];
      }
    }
  } else {
    float* w = Scratch<0>(kDownRows * g);
    for (size_t group = 0; group < m / g; ++group) {
      const uint8_t* down = geo.DownRows(job, group);
      for (size_t j0 = c0; j0 < c1; j0 += kDownRows) {
        const size_t rows = std::min(kDownRows, c1 - j0);
        DecodeBlocks<F>(down + j0 * geo.down_row_bytes, rows * row_blocks, w);
        for (size_t t = 0; t < n; ++t) {
          const float* ht = h + t * ldh + group * g;
          float* yt = job.y + t * d + j0;
          for (size_t r = 0; r < rows; ++r) yt[r] += Dot(w + r * g, ht, g);
        }
      }
    }
  }
}

using GateUpFn = void (*)(const Groups&, const ExpertActivation&, const ExpertJob&,
                          const int8::Activations*, size_t, size_t, float*, size_t);
using DownFn = void (*)(const Groups&, const ExpertJob&, const float*, const int8::Activations*,
                        size_t, size_t, size_t, size_t);

#define MOEX_QUANT_FORMATS(X)                                                                 \
  X(kQ4_0)                                                                                    \
  X(kQ4_1) X(kQ5_0) X(kQ5_1) X(kQ8_0) X(kQ2_K) X(kQ3_K) X(kQ4_K) X(kQ5_K) X(kQ6_K) X(kIQ4_NL) \
      X(kIQ4_XS) X(kMXFP4)

// GCC's SLP vectoriser packs the per-token activation pointers that q4_1's and iq4_xs's
// integer tiles advance every block into vector registers, then extracts each one for its
// load: shuffles on the port their code decoding needs. Compiled without it, their passes
// of 8-32 tokens per expert ran 1.6-1.9x faster (kernels_bench --few-tokens, docs/kernels.md);
// the other formats gained nothing measurable, so they keep it. It only moves integer
// pointer arithmetic: the results are the same bits.
template <QuantFormat F>
constexpr bool kWithoutSlp = F == QuantFormat::kQ4_1 || F == QuantFormat::kIQ4_XS;

template <QuantFormat F>
void GateUp(const Groups& geo, const ExpertActivation& act, const ExpertJob& job,
            const int8::Activations* xq, size_t a, size_t b, float* h, size_t ldh) {
  GateUpBody<F>(geo, act, job, xq, a, b, h, ldh);
}
template <QuantFormat F>
__attribute__((optimize("no-tree-slp-vectorize"))) void GateUpWithoutSlp(
    const Groups& geo, const ExpertActivation& act, const ExpertJob& job,
    const int8::Activations* xq, size_t a, size_t b, float* h, size_t ldh) {
  GateUpBody<F>(geo, act, job, xq, a, b, h, ldh);
}
template <QuantFormat F>
void Down(const Groups& geo, const ExpertJob& job, const float* h, const int8::Activations* hq,
          size_t ldh, size_t m, size_t c0, size_t c1) {
  DownBody<F>(geo, job, h, hq, ldh, m, c0, c1);
}
template <QuantFormat F>
__attribute__((optimize("no-tree-slp-vectorize"))) void DownWithoutSlp(
    const Groups& geo, const ExpertJob& job, const float* h, const int8::Activations* hq,
    size_t ldh, size_t m, size_t c0, size_t c1) {
  DownBody<F>(geo, job, h, hq, ldh, m, c0, c1);
}

// The block size of a format's int8 activations, 0 when it has no integer kernel.
template <QuantFormat F>
constexpr size_t Int8BlockOf() {
  if constexpr (int8::Kernel<F>::kEnabled) {
    return int8::Kernel<F>::kAct;
  } else {
    return 0;
  }
}

// The gate/up and down kernels of a format, and its int8 activation block (0: f32 only).
struct FormatKernels {
  GateUpFn gate_up;
  DownFn down;
  size_t int8_block;
};
FormatKernels KernelsOf(QuantFormat f) {
  switch (f) {
#define MOEX_CASE(F)                                                                               \
  case QuantFormat::F:                                                                             \
    return {                                                                                       \
        kWithoutSlp<QuantFormat::F> ? &GateUpWithoutSlp<QuantFormat::F> : &GateUp<QuantFormat::F>, \
        kWithoutSlp<QuantFormat::F> ? &DownWithoutSlp<QuantFormat::F> : &Down<QuantFormat::F>,     \
        Int8BlockOf<QuantFormat::F>()};
    MOEX_QUANT_FORMATS(MOEX_CASE)
#undef MOEX_CASE
  }
  return {nullptr, nullptr, 0};
}

// Runs the jobs with gate/up kernels `up` and down kernels `down`. With int8 activations
// (and integer kernels for the format), each job's x is quantised once before its gate/up
// rows and its h once before its down rows.
void Run(std::span<const ExpertJob> jobs, const Groups& geo, const FormatKernels& up,
         const FormatKernels& dn, ThreadPool& pool, const ExpertActivation& act) {
  const size_t d = geo.d;
  const size_t num_jobs = jobs.size();
  // h per job: [n][m] floats.
  std::vector<size_t> h_offset(num_jobs + 1, 0), neurons(num_jobs), columns(num_jobs);
  std::vector<uint64_t> neuron_cost(num_jobs), column_cost(num_jobs), job_cost(num_jobs);
  uint64_t total_cost = 0, max_cost = 0;
  for (size_t j = 0; j < num_jobs; ++j) {
    const ExpertJob& job = jobs[j];
    const bool empty = job.n <= 0 || job.neuron_count <= 0;
    const size_t n = empty ? 0 : static_cast<size_t>(job.n);
    const size_t m = empty ? 0 : static_cast<size_t>(job.neuron_count);
    h_offset[j + 1] = h_offset[j] + n * m;
    neurons[j] = m;
    columns[j] = m == 0 ? 0 : d;
    neuron_cost[j] = n + 2;
    column_cost[j] = (m * (n + 2) + d - 1) / d + 1;
    job_cost[j] = m * (n + 2);
    total_cost += job_cost[j];
    max_cost = std::max(max_cost, job_cost[j]);
  }
  if (total_cost == 0) return;
  thread_local std::vector<float> h_storage;
  if (h_storage.size() < h_offset[num_jobs]) h_storage.resize(h_offset[num_jobs]);
  float* h = h_storage.data();
  const bool int8 = GetActivationPrecision() == ActivationPrecision::kInt8;
  const bool int8_up = int8 && up.int8_block != 0, int8_down = int8 && dn.int8_block != 0;
  // The caller's buffers (named through references: a lambda naming a thread_local would
  // reach each worker's own).
  thread_local std::vector<int8::Activations> xq_storage, hq_storage;
  std::vector<int8::Activations>& xq = xq_storage;
  std::vector<int8::Activations>& hq = hq_storage;
  if (int8_up && xq.size() < num_jobs) xq.resize(num_jobs);
  if (int8_down && hq.size() < num_jobs) hq.resize(num_jobs);
  const auto quantize_x = [&](size_t j) {
    if (int8_up && neurons[j] != 0)
      xq[j].Quantize(jobs[j].x, static_cast<size_t>(jobs[j].n), d, d, up.int8_block);
  };
  const auto quantize_h = [&](size_t j) {
    if (int8_down && neurons[j] != 0) {
      hq[j].Quantize(h + h_offset[j], static_cast<size_t>(jobs[j].n), neurons[j], neurons[j],
                     dn.int8_block);
    }
  };
  const auto gate_up = [&](size_t j, size_t a, size_t b) {
    up.gate_up(geo, act, jobs[j], int8_up ? &xq[j] : nullptr, a, b, h + h_offset[j], neurons[j]);
  };
  const auto down = [&](size_t j, size_t c0, size_t c1) {
    dn.down(geo, jobs[j], h + h_offset[j], int8_down ? &hq[j] : nullptr, neurons[j], neurons[j], c0,
            c1);
  };
  const size_t workers = static_cast<size_t>(pool.size());
  if (workers == 1 || max_cost * workers * 4 <= total_cost * 5) {
    // Whole jobs per thread, largest first.
    std::vector<size_t> order(num_jobs);
    for (size_t j = 0; j < num_jobs; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return job_cost[a] > job_cost[b]; });
    const auto run = [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) {
        const size_t j = order[i];
        if (neurons[j] == 0) continue;
        quantize_x(j);
        gate_up(j, 0, neurons[j]);
        quantize_h(j);
        down(j, 0, d);
      }
    };
    if (workers == 1) {
      run(0, num_jobs, 0);
    } else {
      pool.ParallelForDynamic(num_jobs, 1, run);
    }
    return;
  }
  const auto each_job = [&](const auto& fn) {
    pool.ParallelForDynamic(num_jobs, 1, [&](size_t b, size_t e, int) {
      for (size_t j = b; j < e; ++j) fn(j);
    });
  };
  if (int8_up) each_job(quantize_x);
  pool.ParallelFor(workers, 1, [&](size_t b, size_t e, int) {
    for (size_t w = b; w < e; ++w) {
      for (const WorkRange& r : PartitionWork(neurons, neuron_cost, 1, w, workers)) {
        gate_up(r.item, r.begin, r.end);
      }
    }
  });
  if (int8_down) each_job(quantize_h);
  pool.ParallelFor(workers, 1, [&](size_t b, size_t e, int) {
    for (size_t w = b; w < e; ++w) {
      for (const WorkRange& r : PartitionWork(columns, column_cost, kDownRows, w, workers)) {
        down(r.item, r.begin, r.end);
      }
    }
  });
}

// y[t * out + r] = dot(row r, x_t) + bias[r] for rows [r0, r1).
template <QuantFormat F>
void LinearRows(const LinearOutput& o, const float* x, size_t n, const float* xs_all, size_t r0,
                size_t r1) {
  const size_t in = static_cast<size_t>(o.in), out = static_cast<size_t>(o.out);
  const size_t row_bytes = QuantBytes(F, o.in);
  constexpr size_t kBlock = kBlockOf<F>;
  std::vector<const float*> xp(n), xs(n);
  std::vector<float> val(2 * n);
  for (size_t t = 0; t < n; ++t) xp[t] = x + t * in;
  const auto* w = reinterpret_cast<const uint8_t*>(o.w);
  const auto put = [&](size_t r, const float* v) {
    for (size_t t = 0; t < n; ++t) o.y[t * out + r] = v[t] + (o.bias ? o.bias[r] : 0.0f);
  };
  if constexpr (Fused<F>::kEnabled) {
    for (size_t t = 0; t < n; ++t) xs[t] = xs_all + t * (in / Fused<F>::kSub);
    size_t r = r0;
    for (; r + 2 <= r1; r += 2) {  // Row pairs share the x loads.
      const uint8_t* rows[2] = {w + r * row_bytes, w + (r + 1) * row_bytes};
      BlocksDotN<F, 2>(rows, in / kBlock, n, xp.data(), xs.data(), val.data());
      put(r, val.data());
      put(r + 1, val.data() + n);
    }
    if (r < r1) {
      const uint8_t* rows[1] = {w + r * row_bytes};
      BlocksDotN<F, 1>(rows, in / kBlock, n, xp.data(), xs.data(), val.data());
      put(r, val.data());
    }
  } else {
    float* buf = Scratch<0>(in);
    for (size_t r = r0; r < r1; ++r) {
      DecodeBlocks<F>(w + r * row_bytes, in / kBlock, buf);
      for (size_t t = 0; t < n; ++t) val[t] = Dot(buf, xp[t], in);
      put(r, val.data());
    }
  }
}

// Rows [r0, r1) with int8 activations x (quantised once per call).
template <QuantFormat F>
void LinearRowsInt8(const LinearOutput& o, const int8::Span* x, size_t n, size_t r0, size_t r1) {
  const size_t in = static_cast<size_t>(o.in), out = static_cast<size_t>(o.out);
  const size_t row_bytes = QuantBytes(F, o.in);
  constexpr size_t kBlock = kBlockOf<F>;
  float* val = Scratch<0>(2 * n);
  const auto* w = reinterpret_cast<const uint8_t*>(o.w);
  const auto put = [&](size_t r, const float* v) {
    for (size_t t = 0; t < n; ++t) o.y[t * out + r] = v[t] + (o.bias ? o.bias[r] : 0.0f);
  };
  // Row r pairs with row r + half: two streams apart in memory, as gate and up rows are in
  // GateUp, keep twice the prefetched bytes in flight that two adjacent rows would.
  const size_t half = (r1 - r0) / 2;
  for (size_t i = r0; i < r0 + half; ++i) {
    const uint8_t* rows[2] = {w + i * row_bytes, w + (i + half) * row_bytes};
    int8::BlocksDotN<F, 2>(rows, in / kBlock, n, x, val);
    put(i, val);
    put(i + half, val + n);
  }
  if (r0 + 2 * half < r1) {
    const uint8_t* rows[1] = {w + (r1 - 1) * row_bytes};
    int8::BlocksDotN<F, 1>(rows, in / kBlock, n, x, val);
    put(r1 - 1, val);
  }
}

template <QuantFormat F>
void Linear(const LinearOutput& o, const float* x, size_t n, ThreadPool& pool) {
  const size_t in = static_cast<size_t>(o.in);
  const size_t rows = static_cast<size_t>(o.out);
  // Rows in grains of ~64k multiply-adds; every row is computed the same way whoever runs it.
  const size_t grain = std::max<size_t>(1, (size_t{1} << 16) / std::max<size_t>(1, in * n));
  std::vector<float> xs_all;
  if constexpr (Fused<F>::kEnabled) {
    xs_all.resize(n * (in / Fused<F>::kSub));
    if constexpr (Fused<F>::kHasMin) {
      for (size_t t = 0; t < n; ++t)
        SubSums(x + t * in, in, Fused<F>::kSub, xs_all.data() + t * (in / Fused<F>::kSub));
    }
  }
  pool.ParallelForDynamic(
      rows, grain, [&](size_t b, size_t e, int) { LinearRows<F>(o, x, n, xs_all.data(), b, e); });
}

// Rows [r0, r1) from the interleaved copy (r0 a multiple of 8): eight rows in the lanes of
// one vector, up to four tokens per pass over them.
template <QuantFormat F>
void LinearRowsInterleaved(const LinearOutput& o, const int8::Span* x, size_t n, size_t r0,
                           size_t r1) {
  const size_t out = static_cast<size_t>(o.out), blocks = static_cast<size_t>(o.in) / 32;
  const auto* base = reinterpret_cast<const uint8_t*>(o.interleaved);
  const size_t group_bytes = blocks * int8::Interleaved8<F>::kBlockBytes;
  for (size_t r = r0; r < r1; r += 8) {
    const uint8_t* group = base + r / 8 * group_bytes;
    const size_t count = std::min<size_t>(8, out - r);
    for (size_t t = 0; t < n; t += 4) {
      const size_t tokens = std::min<size_t>(4, n - t);
      __m256 acc[4];
      switch (tokens) {
        case 4:
          int8::InterleavedDot<F, 4>(group, blocks, x + t, acc);
          break;
        case 3:
          int8::InterleavedDot<F, 3>(group, blocks, x + t, acc);
          break;
        case 2:
          int8::InterleavedDot<F, 2>(group, blocks, x + t, acc);
          break;
        default:
          int8::InterleavedDot<F, 1>(group, blocks, x + t, acc);
      }
      for (size_t i = 0; i < tokens; ++i) {
        alignas(32) float v[8];
        _mm256_store_ps(v, acc[i]);
        float* y = o.y + (t + i) * out + r;
        for (size_t j = 0; j < count; ++j) y[j] = v[j] + (o.bias ? o.bias[r + j] : 0.0f);
      }
    }
  }
}

using LinearRowsInt8Fn = void (*)(const LinearOutput&, const int8::Span*, size_t, size_t, size_t);

// The interleaved row kernel of an output, null when it has none.
LinearRowsInt8Fn LinearRowsInterleavedOf(const LinearOutput& o) {
  if (o.interleaved == nullptr) return nullptr;
  switch (*QuantFormatOf(o.dtype)) {
    case QuantFormat::kQ4_0:
      return &LinearRowsInterleaved<QuantFormat::kQ4_0>;
    case QuantFormat::kQ8_0:
      return &LinearRowsInterleaved<QuantFormat::kQ8_0>;
    default:
      return nullptr;
  }
}

// A format's int8 row kernel, null when it has none.
LinearRowsInt8Fn LinearRowsInt8Of(QuantFormat f) {
  switch (f) {
#define MOEX_CASE(F)                                                                              \
  case QuantFormat::F:                                                                            \
    if constexpr (int8::Kernel<QuantFormat::F>::kEnabled) return &LinearRowsInt8<QuantFormat::F>; \
    return nullptr;
    MOEX_QUANT_FORMATS(MOEX_CASE)
#undef MOEX_CASE
  }
  return nullptr;
}

// Several outputs of one input with int8 activations (q, k and v): x quantised once per
// activation block size, every output's rows in one parallel region. A row's result does
// not depend on which piece it falls in, so this is the same bits as one call per output.
void LinearMultiInt8(const LinearOutput* outs, size_t count, const float* x, size_t n,
                     ThreadPool& pool) {
  thread_local int8::Activations storage[2];                     // Blocks of 32 and of 256.
  int8::Activations* quantised[2] = {&storage[0], &storage[1]};  // The caller's (see Run).
  bool done[2] = {false, false};
  struct Piece {
    size_t output, r0, r1;
  };
  // Pieces of up to ~1M multiply-adds, but at least two per thread: each piece restarts two
  // row streams, and with pieces of 64k (32 rows of 2048) the one-token Linear read q4_K at
  // 32 GB/s where 1M pieces read 44 (kernels_bench --quant, 2 threads, Zen 5).
  size_t macs = 0;
  for (size_t i = 0; i < count; ++i)
    macs += static_cast<size_t>(std::max<int64_t>(0, outs[i].out)) *
            static_cast<size_t>(outs[i].in) * n;
  const size_t piece_macs = std::clamp<size_t>(macs / (2 * static_cast<size_t>(pool.size())),
                                               size_t{1} << 16, size_t{1} << 20);
  std::vector<Piece> pieces;
  std::vector<LinearRowsInt8Fn> fns(count);
  std::vector<int8::Span> spans[2];  // Each token's row of quantised[0] / [1].
  std::vector<size_t> which_of(count, 0);
  for (size_t i = 0; i < count; ++i) {
    const LinearOutput& o = outs[i];
    const QuantFormat f = *QuantFormatOf(o.dtype);
    fns[i] = LinearRowsInterleavedOf(o);
    if (fns[i] == nullptr) fns[i] = LinearRowsInt8Of(f);
    if (o.out <= 0) continue;
    const size_t block = KernelsOf(f).int8_block, which = block == 32 ? 0 : 1;
    const size_t in = static_cast<size_t>(o.in);
    if (!done[which]) {
      quantised[which]->Quantize(x, n, in, in, block);
      for (size_t t = 0; t < n; ++t) spans[which].push_back(quantised[which]->Row(t));
      done[which] = true;
    }
    which_of[i] = which;
    const size_t rows = static_cast<size_t>(o.out);
    // Pieces in whole groups of eight rows (the interleaved kernels').
    const size_t grain =
        (std::max<size_t>(1, piece_macs / std::max<size_t>(1, in * n)) + 7) / 8 * 8;
    for (size_t r = 0; r < rows; r += grain) pieces.push_back({i, r, std::min(rows, r + grain)});
  }
  pool.ParallelForDynamic(pieces.size(), 1, [&](size_t b, size_t e, int) {
    for (size_t p = b; p < e; ++p) {
      const Piece& piece = pieces[p];
      fns[piece.output](outs[piece.output], spans[which_of[piece.output]].data(), n, piece.r0,
                        piece.r1);
    }
  });
}

}  // namespace quant

void QuantLinearImpl(const LinearOutput* o, const float* x, size_t n, ThreadPool* pool) {
  switch (*QuantFormatOf(o->dtype)) {
#define MOEX_LINEAR_CASE(F) \
  case QuantFormat::F:      \
    return quant::Linear<QuantFormat::F>(*o, x, n, *pool);
    MOEX_QUANT_FORMATS(MOEX_LINEAR_CASE)
#undef MOEX_LINEAR_CASE
  }
}

void QuantExpertFfnImpl(const ExpertJob* jobs, size_t num_jobs, const ExpertEncoding* e, size_t d,
                        ThreadPool* pool, const ExpertActivation* act) {
  quant::Groups geo;
  geo.d = d;
  geo.g = static_cast<size_t>(e->group_neurons);
  geo.group_bytes = geo.g * e->record_bytes;
  geo.row_bytes = DTypeBytes(e->gate_up, static_cast<int64_t>(d));
  geo.down_row_bytes = DTypeBytes(e->down, e->group_neurons);
  quant::Run(std::span<const ExpertJob>(jobs, num_jobs), geo,
             quant::KernelsOf(*QuantFormatOf(e->gate_up)),
             quant::KernelsOf(*QuantFormatOf(e->down)), *pool, *act);
}

// Decodes `blocks` blocks with this target's decoder (for tests: the SIMD decoders must give
// core Dequantize's floats).
void DecodeBlocksImpl(DType dtype, const uint8_t* b, size_t blocks, float* out) {
  switch (*QuantFormatOf(dtype)) {
#define MOEX_DECODE_CASE(F) \
  case QuantFormat::F:      \
    return quant::DecodeBlocks<QuantFormat::F>(b, blocks, out);
    MOEX_QUANT_FORMATS(MOEX_DECODE_CASE)
#undef MOEX_DECODE_CASE
  }
}

void QuantLinearMultiInt8Impl(const LinearOutput* outs, size_t count, const float* x, size_t n,
                              ThreadPool* pool) {
  quant::LinearMultiInt8(outs, count, x, n, *pool);
}

size_t Int8BlockImpl(DType dtype) {
  return quant::KernelsOf(*QuantFormatOf(dtype)).int8_block;
}

void QuantizeInt8Impl(const float* x, size_t k, size_t block, int8_t* q, float* d, int16_t* s) {
  for (size_t b = 0; b < k / block; ++b)
    int8::QuantizeBlock(x + b * block, block, q + b * block, d + b, s + b * (block / 16));
}

}  // namespace moex::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moex::kernels {

HWY_EXPORT(QuantExpertFfnImpl);
HWY_EXPORT(DecodeBlocksImpl);
HWY_EXPORT(QuantLinearImpl);
HWY_EXPORT(Int8BlockImpl);
HWY_EXPORT(QuantLinearMultiInt8Impl);

void QuantLinearMultiInt8(std::span<const LinearOutput> outs, const float* x, int64_t n,
                          ThreadPool& pool) {
  for (const LinearOutput& o : outs) {
    Check(IsBlockQuantized(o.dtype) && o.in % DTypeBlockElems(o.dtype) == 0,
          "QuantLinear: ", DTypeName(o.dtype), " input width ", o.in, " is not whole blocks");
  }
  if (n <= 0 || outs.empty()) return;
  HWY_DYNAMIC_DISPATCH(QuantLinearMultiInt8Impl)
  (outs.data(), outs.size(), x, static_cast<size_t>(n), &pool);
}
HWY_EXPORT(QuantizeInt8Impl);

int64_t Int8ActivationBlock(DType dtype) {
  if (!IsBlockQuantized(dtype)) return 0;
  return static_cast<int64_t>(HWY_DYNAMIC_DISPATCH(Int8BlockImpl)(dtype));
}

void QuantizeActivationsInt8(const float* x, int64_t k, int64_t block, int8_t* q, float* d,
                             int16_t* s) {
  Check((block == 32 || block == 256) && k % block == 0, "QuantizeActivationsInt8: ", k,
        " values are not whole blocks of ", block);
  HWY_DYNAMIC_DISPATCH(QuantizeInt8Impl)
  (x, static_cast<size_t>(k), static_cast<size_t>(block), q, d, s);
}

void QuantLinear(const LinearOutput& o, const float* x, int64_t n, ThreadPool& pool) {
  Check(IsBlockQuantized(o.dtype) && o.in % DTypeBlockElems(o.dtype) == 0,
        "QuantLinear: ", DTypeName(o.dtype), " input width ", o.in, " is not whole blocks");
  if (n <= 0 || o.out <= 0) return;
  HWY_DYNAMIC_DISPATCH(QuantLinearImpl)(&o, x, static_cast<size_t>(n), &pool);
}

void QuantExpertFfn(std::span<const ExpertJob> jobs, const ExpertEncoding& e, int64_t d_model,
                    ThreadPool& pool, const ExpertActivation& act) {
  Check(IsBlockQuantized(e.gate_up) && IsBlockQuantized(e.down),
        "QuantExpertFfn: ", DTypeName(e.gate_up), " gate/up and ", DTypeName(e.down),
        " down are not both block formats");
  const int64_t group = e.group_neurons;
  const int64_t gate_up_block = DTypeBlockElems(e.gate_up), down_block = DTypeBlockElems(e.down);
  Check(group > 0 && group % gate_up_block == 0 && group % down_block == 0,
        "ExpertFfn: ", "a record group of ", group, " neurons is not whole ", DTypeName(e.gate_up),
        " and ", DTypeName(e.down), " blocks");
  Check(e.record_bytes >= e.NaturalRecordBytes(d_model), "ExpertFfn: records of ", e.record_bytes,
        " bytes cannot hold ", DTypeName(e.gate_up), "/", DTypeName(e.down), " rows of ", d_model);
  Check(d_model > 0 && d_model % gate_up_block == 0, "ExpertFfn: ", DTypeName(e.gate_up),
        " d_model ", d_model, " is not a multiple of ", gate_up_block);
  for (const ExpertJob& job : jobs) {
    Check(job.neuron_count % group == 0, "ExpertFfn: ", DTypeName(e.gate_up), "/",
          DTypeName(e.down), " job of ", job.neuron_count,
          " neurons is not whole record groups of ", group);
  }
  if (jobs.empty()) return;
  HWY_DYNAMIC_DISPATCH(QuantExpertFfnImpl)
  (jobs.data(), jobs.size(), &e, static_cast<size_t>(d_model), &pool, &act);
}

void DecodeQuantBlocks(DType dtype, const std::byte* blocks, int64_t count, float* out) {
  Check(IsBlockQuantized(dtype) && count % DTypeBlockElems(dtype) == 0,
        "DecodeQuantBlocks: ", count, " ", DTypeName(dtype), " weights are not whole blocks");
  HWY_DYNAMIC_DISPATCH(DecodeBlocksImpl)
  (dtype, reinterpret_cast<const uint8_t*>(blocks),
   static_cast<size_t>(count / DTypeBlockElems(dtype)), out);
}

}  // namespace moex::kernels
#endif  // HWY_ONCE

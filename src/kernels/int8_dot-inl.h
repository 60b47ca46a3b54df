// Integer dot products of GGML blocks with int8 activations (ActivationPrecision::kInt8,
// kernels/activation_precision.h), as llama.cpp computes them: the activations are rounded
// to int8 per block of A values with one f32 scale, each block's codes are multiplied with
// them in 8-bit lanes (maddubs: unsigned codes × signed activations, pairwise into int16,
// then into int32 lanes), and floats appear once per activation block. Reading a block
// costs a few integer instructions per 32 weights instead of widening every weight to f32.
//
// Activation blocks: A = 256 for the 256-weight formats (q2_K ... q6_K, iq4_xs; as
// llama.cpp's q8_K) and A = 32 for the 32-weight ones (q8_0, q4_0, q4_1, q5_0, q5_1,
// iq4_nl, mxfp4; as its q8_0, with an f32 scale instead of f16). Per block: d = max|x| / 127,
// q = round-half-even(x · (127 / max|x|)), and the int16 sums of q per 16 (the formats whose
// codes carry an offset or a minimum use them). The result is the exact dot of the
// dequantised weights with the dequantised activations d·q, up to the float rounding of the
// per-block scaling (tested against a double-precision reference of that).
//
// Determinism: the integer sums are exact, and each (row, token) pair gets the same float
// operations in the same order whatever the tile of rows and tokens it is computed in, so
// the batch, thread and chunk invariances of quant_expert_ffn.cc hold in this mode too.
//
// The x86 intrinsics are the AVX2 ones (every compiled target has them). On the AVX3_DL
// target (AVX512-VNNI: Zen 4/5, Ice Lake and later) the byte and int16 dot products that
// feed an int32 sum are one fused instruction each (vpdpbusd, vpdpwssd; AddDotU and
// AddMadd below): the same integers, so every target gives the same bits. On the AVX-512
// targets the q4_K, q5_K and q6_K tiles multiply two 32-code runs per 512-bit instruction
// and fold the int32 halves back before the floats (FoldHalves): again the same integers.
// Included once per Highway target, hence the toggle guard.
#if defined(MOEX_KERNELS_INT8_DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEX_KERNELS_INT8_DOT_INL_H_
#undef MOEX_KERNELS_INT8_DOT_INL_H_
#else
#define MOEX_KERNELS_INT8_DOT_INL_H_
#endif

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/quant_format.h"
#include "hwy/highway.h"
#include "kernels/interleave.h"

HWY_BEFORE_NAMESPACE();
namespace moex::kernels::HWY_NAMESPACE::int8 {

// One token's int8 activations from some block on: codes, one scale per A codes, and the
// sums of the codes per 16.
struct Span {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int16_t* s = nullptr;
  // The same activations `elems` codes further on (a multiple of A).
  Span Advance(size_t elems, size_t a) const { return {q + elems, d + elems / a, s + elems / 16}; }
};

// Rows of n tokens × k activations quantised in blocks of a (k a multiple of a).
class Activations {
 public:
  void Quantize(const float* x, size_t n, size_t ldx, size_t k, size_t a);
  Span Row(size_t t) const {
    return {q_.data() + t * k_, d_.data() + t * (k_ / a_), s_.data() + t * (k_ / 16)};
  }
  size_t block() const { return a_; }

 private:
  size_t k_ = 0, a_ = 32;
  std::vector<int8_t> q_;
  std::vector<float> d_;
  std::vector<int16_t> s_;
};

// Quantises one block of a (a multiple of 32) values: the exact arithmetic the scalar
// reference in tests repeats (max |x|, 127 / max, products rounded half to even).
HWY_INLINE void QuantizeBlock(const float* x, size_t a, int8_t* q, float* d, int16_t* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 mx = _mm256_setzero_ps();
  for (size_t i = 0; i < a; i += 8)
    mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  float lanes[8];
  _mm256_storeu_ps(lanes, mx);
  float amax = 0;
  for (float v : lanes) amax = v > amax ? v : amax;
  *d = amax / 127.0f;
  const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t i = 0; i < a; i += 32) {
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), id));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), id));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), id));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), id));
    // packs works per 128-bit lane; the permutation puts the 32 codes back in order.
    const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), _mm256_permutevar8x32_epi32(w, order));
  }
  for (size_t j = 0; j < a / 16; ++j) {
    int sum = 0;
    for (size_t i = 0; i < 16; ++i) sum += q[16 * j + i];
    s[j] = static_cast<int16_t>(sum);
  }
}

inline void Activations::Quantize(const float* x, size_t n, size_t ldx, size_t k, size_t a) {
  k_ = k;
  a_ = a;
  if (q_.size() < n * k) q_.resize(n * k);
  if (d_.size() < n * k / a) d_.resize(n * k / a);
  if (s_.size() < n * k / 16) s_.resize(n * k / 16);
  for (size_t t = 0; t < n; ++t) {
    for (size_t b = 0; b < k / a; ++b) {
      QuantizeBlock(x + t * ldx + b * a, a, q_.data() + t * k + b * a, d_.data() + t * (k / a) + b,
                    s_.data() + t * (k / 16) + b * (a / 16));
    }
  }
}

HWY_INLINE float HalfAt(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

HWY_INLINE __m256i Load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
HWY_INLINE __m256i Nibbles(__m256i v) {
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}
HWY_INLINE __m256i HighNibbles(__m256i v) {
  return Nibbles(_mm256_srli_epi16(v, 4));
}

// 16 bytes of nibbles as the 32 codes [low nibbles | high nibbles] (the 32-weight formats'
// order: byte j holds weights j and j + 16).
HWY_INLINE __m256i Nibbles16(const uint8_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), _mm_and_si128(raw, mask));
}
// A 16-entry int8 codebook looked up by the nibbles of 16 bytes, in the same order.
HWY_INLINE __m256i Lookup16(const int8_t* table, const uint8_t* p) {
  const __m256i t =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
  return _mm256_shuffle_epi8(t, Nibbles16(p));
}

// Unsigned codes u (0..127) times int8 activations q: 16 int16 pair sums (no saturation
// for the code ranges used here).
HWY_INLINE __m256i MulU(__m256i u, __m256i q) {
  return _mm256_maddubs_epi16(u, q);
}
// Signed codes w times q, through |w| and q with w's sign (|w| <= 128, so no saturation).
HWY_INLINE __m256i MulS(__m256i w, __m256i q) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
}
HWY_INLINE __m256i Widen(__m256i pairs) {
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// acc + (sum of the four products u·q per 32-bit lane), u unsigned and q signed bytes; and
// acc + madd(a, b) (int16 pairs). With VNNI one instruction each. Written as EVEX assembly:
// Highway's AVX3_DL target string also enables AVX-VNNI, for which GCC would emit the VEX
// encoding that CPUs with AVX512-VNNI but without AVX-VNNI (Zen 4, Ice Lake) do not have.
// Without VNNI maddubs pairs the products in int16 first; the code ranges used here keep
// those pair sums below 2^15 (see MulU), so both forms give the same integers.
#if HWY_TARGET == HWY_AVX3_DL
HWY_INLINE __m256i AddDotU(__m256i acc, __m256i u, __m256i q) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "vm"(q));
  return acc;
}
HWY_INLINE __m256i AddMadd(__m256i acc, __m256i a, __m256i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
  return acc;
}
#else
HWY_INLINE __m256i AddDotU(__m256i acc, __m256i u, __m256i q) {
  return _mm256_add_epi32(acc, Widen(MulU(u, q)));
}
HWY_INLINE __m256i AddMadd(__m256i acc, __m256i a, __m256i b) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}
#endif
// Signed codes w: |w| times q with w's sign, as MulS.
HWY_INLINE __m256i AddDotS(__m256i acc, __m256i w, __m256i q) {
  return AddDotU(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
}

#if MOEX_AVX512_TARGET
// 512-bit forms for the 256-weight formats: one vector covers two 32-code runs.
// Their int32 lanes are folded back to the 256-bit layout (FoldHalves: lane i of the low
// half plus lane i of the high one) before anything becomes a float, so the integers, and
// every float operation after them, are the 256-bit path's: the same bits on every target.
HWY_INLINE __m512i Load64(const void* p) {
  return _mm512_loadu_si512(p);
}
HWY_INLINE __m256i FoldHalves(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}
// [Nibbles(raw) | HighNibbles(raw)] of the 32 bytes at p as one vector: one broadcast load, a
// shift of the high half alone and a mask (three instructions where two 256-bit halves and
// their insertion take five).
HWY_INLINE __m512i NibblePairs(const uint8_t* p) {
  const __m512i raw = _mm512_broadcast_i64x4(Load32(p));
  return _mm512_and_si512(_mm512_mask_srli_epi16(raw, 0xFFFF0000u, raw, 4),
                          _mm512_set1_epi8(0x0f));
}
// Int16 lanes a, b, c, e of v (each < 16) broadcast over the four 128-bit quarters in that
// order: one word permute (what two BroadcastI16 and an insertion build otherwise).
HWY_INLINE __m512i BroadcastQuartersI16(__m512i v, int a, int b, int c, int e) {
  const auto q = [](int lane) { return _mm_set1_epi16(static_cast<int16_t>(lane)); };
  const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(q(b), q(a))),
                                         _mm256_set_m128i(q(e), q(c)), 1);
  return _mm512_permutexvar_epi16(idx, v);
}
HWY_INLINE __m512i MulU(__m512i u, __m512i q) {
  return _mm512_maddubs_epi16(u, q);
}
#if HWY_TARGET == HWY_AVX3_DL
HWY_INLINE __m512i AddMadd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
  return acc;
}
#else
HWY_INLINE __m512i AddMadd(__m512i acc, __m512i a, __m512i b) {
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
}
#endif
#endif  // MOEX_AVX512_TARGET

// Sum of the 8 lanes in a fixed order.
HWY_INLINE float HSum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

template <QuantFormat F>
struct Kernel {
  static constexpr bool kEnabled = false;
};

// A format's Tile<R, T>(b, x, acc, corr) adds one block of R rows (b[r]) times T tokens
// (x[t] at the block's first activation) to acc[r * T + t] (vector) and corr[r * T + t]
// (scalar); out = HSum(acc) + corr.

// How far ahead of its loads each row is prefetched (a row's blocks are one forward stream;
// past a row's end the prefetch reaches the next row, the next one read in Linear and down).
// Measured on Zen 5 (OLMoE small, 2 threads): no prefetch 90 tok/s decode in Q4_K_M, 1 KiB
// 161-163, 2 KiB 163-165, 4 KiB 146-160; in Q8_0 110 / 117-118 / 115-116 for 1 / 2 / 4 KiB.
constexpr size_t kPrefetchBytes = 2048;

// The 32-weight formats: w = d·c (q8_0), d·(c - 8) (q4_0), d·c + m (q4_1),
// d·(c - 16) (q5_0), d·c + m (q5_1), d·book[c] (iq4_nl), 2^(e-128)·fp4x2[c] (mxfp4). `Codes` gives
// 32 unsigned codes (kSigned false) or signed values; `Scale` the block's scale; `Offset` what
// multiplies the sum of the activations; `kHalfScales` that both are f16 at bytes 0 and 2.
template <class Q>
struct Block32Kernel {
  static constexpr bool kEnabled = true;
  static constexpr size_t kBlock = 32, kBytes = Q::kBytes, kAct = 32;
  template <size_t R, size_t T>
  static HWY_INLINE void Tile(const uint8_t* const* b, const Span* x, __m256* acc, float* corr) {
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const float d = Q::Scale(b[r]);
      const __m256i c = Q::Codes(b[r]);
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) {
        const __m256i qx = Load32(x[t].q);
        const __m256i zero = _mm256_setzero_si256();
        const __m256i p = Q::kSigned ? AddDotS(zero, c, qx) : AddDotU(zero, c, qx);
        const float dx = x[t].d[0];
        acc[r * T + t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * dx), acc[r * T + t]);
        if constexpr (Q::kHasOffset) {
          // An explicit fma: a contracted `corr += m * dx * s` is fused or not depending on
          // how GCC's SLP vectoriser packs the tile's R * T scalars, which differs with T (seen
          // under -march=native), so a token's bits depended on its tile (docs/kernels.md).
          corr[r * T + t] = std::fma(Q::Offset(b[r]) * dx,
                                     static_cast<float>(x[t].s[0] + x[t].s[1]), corr[r * T + t]);
        }
      }
    }
  }

  // y[t][r] += dot(row r's `blocks` blocks, x[t]) for `rows` rows `row_bytes` apart and T
  // tokens, eight rows at a time: per block and token the eight rows' integer sums are
  // reduced into one vector (lane r: row r) and scaled there, so a short run of blocks (a
  // down row's share of one record group) costs no horizontal sum per row, and the T tokens
  // share each block's decoded codes. A (row, token) value is its own lane's arithmetic
  // alone: the same whatever rows and tokens share its vector. Codes with a constant bias
  // (q4_0's c - 8, q5_0's c - 16) are multiplied unsigned and bias * sum(q) is taken off the
  // reduced sums: the same integers as signed codes.
  template <size_t T>
  static HWY_INLINE void AddRows(const uint8_t* first, size_t row_bytes, size_t rows, size_t blocks,
                                 const Span* x, float* const* y) {
    for (size_t r0 = 0; r0 < rows; r0 += 8) {
      const size_t count = rows - r0 < 8 ? rows - r0 : 8;
      // The rows are one forward stream: prefetched as BlocksDot prefetches a row.
      const char* ahead = reinterpret_cast<const char*>(first + r0 * row_bytes) + kPrefetchBytes;
      for (size_t line = 0; line < count * row_bytes; line += 64)
        _mm_prefetch(ahead + line, _MM_HINT_T0);
      __m256 sum[T], offset[T];
#pragma GCC unroll 4
      for (size_t t = 0; t < T; ++t) sum[t] = offset[t] = _mm256_setzero_ps();
      for (size_t k = 0; k < blocks; ++k) {
        __m256i c[8];
        // The eight rows' scales (and offsets): f16 ones gathered as bits and converted in
        // one instruction (the same exact conversion as one at a time).
        alignas(32) float scale[8] = {}, off[8] = {};
        alignas(16) uint16_t scale_bits[8] = {}, off_bits[8] = {};
#pragma GCC unroll 8
        for (size_t r = 0; r < 8; ++r) {
          if (r < count) {
            const uint8_t* b = first + (r0 + r) * row_bytes + k * kBytes;
            if constexpr (Q::kBias != 0) {
              c[r] = Q::UnsignedCodes(b);
            } else {
              c[r] = Q::Codes(b);
            }
            if constexpr (Q::kHalfScales) {
              std::memcpy(&scale_bits[r], b, 2);
              if constexpr (Q::kHasOffset) std::memcpy(&off_bits[r], b + 2, 2);
            } else {
              scale[r] = Q::Scale(b);
              if constexpr (Q::kHasOffset) off[r] = Q::Offset(b);
            }
          } else {
            c[r] = _mm256_setzero_si256();
          }
        }
        const auto halves = [](const uint16_t* bits) {
          return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(bits)));
        };
        const __m256 scales = Q::kHalfScales ? halves(scale_bits) : _mm256_load_ps(scale);
        const __m256 offsets = Q::kHalfScales ? halves(off_bits) : _mm256_load_ps(off);
#pragma GCC unroll 4
        for (size_t t = 0; t < T; ++t) {
          const __m256i qx = Load32(x[t].q + 32 * k);
          __m256i p[8];
#pragma GCC unroll 8
          for (size_t r = 0; r < 8; ++r) {
            const __m256i zero = _mm256_setzero_si256();
            p[r] = Q::kSigned && Q::kBias == 0 ? AddDotS(zero, c[r], qx) : AddDotU(zero, c[r], qx);
          }
          // hadd pairs lanes within 128-bit halves; two rounds leave row r's half-sums in lane
          // r % 4 of each half, and adding the halves finishes them.
          const __m256i a01 = _mm256_hadd_epi32(p[0], p[1]), a23 = _mm256_hadd_epi32(p[2], p[3]);
          const __m256i a45 = _mm256_hadd_epi32(p[4], p[5]), a67 = _mm256_hadd_epi32(p[6], p[7]);
          const __m256i b03 = _mm256_hadd_epi32(a01, a23), b47 = _mm256_hadd_epi32(a45, a67);
          __m256i isum = _mm256_add_epi32(_mm256_permute2x128_si256(b03, b47, 0x20),
                                          _mm256_permute2x128_si256(b03, b47, 0x31));
          const int qsum = x[t].s[2 * k] + x[t].s[2 * k + 1];
          if constexpr (Q::kBias != 0)
            isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(Q::kBias * qsum));
          const __m256 dx = _mm256_set1_ps(x[t].d[k]);
          sum[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(scales, dx), sum[t]);
          if constexpr (Q::kHasOffset) {
            const __m256 xs = _mm256_set1_ps(x[t].d[k] * static_cast<float>(qsum));
            offset[t] = _mm256_fmadd_ps(offsets, xs, offset[t]);
          }
        }
      }
#pragma GCC unroll 4
      for (size_t t = 0; t < T; ++t) {
        const __m256 total = _mm256_add_ps(sum[t], offset[t]);
        if (count == 8) {
          _mm256_storeu_ps(y[t] + r0, _mm256_add_ps(_mm256_loadu_ps(y[t] + r0), total));
          continue;
        }
        alignas(32) float v[8];
        _mm256_store_ps(v, total);
        for (size_t r = 0; r < count; ++r) y[t][r0 + r] += v[r];
      }
    }
  }
};

struct Q8_0Codes {
  static constexpr size_t kBytes = 34;
  static constexpr bool kHalfScales = true;
  static constexpr bool kSigned = true, kHasOffset = false;
  static constexpr int kBias = 0;
  static HWY_INLINE float Scale(const uint8_t* b) { return HalfAt(b); }
  static HWY_INLINE float Offset(const uint8_t*) { return 0.0f; }
  static HWY_INLINE __m256i Codes(const uint8_t* b) { return Load32(b + 2); }
};
struct Q4_0Codes {
  static constexpr size_t kBytes = 18;
  // Signed codes c - 8 (the sign trick costs less than a scalar offset term per token);
  // AddRows multiplies the unsigned codes and takes the bias off the reduced sums instead.
  static constexpr bool kHalfScales = true;
  static constexpr bool kSigned = true, kHasOffset = false;
  static constexpr int kBias = 8;
  static HWY_INLINE float Scale(const uint8_t* b) { return HalfAt(b); }
  static HWY_INLINE float Offset(const uint8_t*) { return 0.0f; }
  static HWY_INLINE __m256i UnsignedCodes(const uint8_t* b) { return Nibbles16(b + 2); }
  static HWY_INLINE __m256i Codes(const uint8_t* b) {
    return _mm256_sub_epi8(UnsignedCodes(b), _mm256_set1_epi8(kBias));
  }
};
struct Q4_1Codes {
  static constexpr size_t kBytes = 20;
  static constexpr bool kHalfScales = true;
  static constexpr bool kSigned = false, kHasOffset = true;
  static constexpr int kBias = 0;
  static HWY_INLINE float Scale(const uint8_t* b) { return HalfAt(b); }
  static HWY_INLINE float Offset(const uint8_t* b) { return HalfAt(b + 2); }
  static HWY_INLINE __m256i Codes(const uint8_t* b) { return Nibbles16(b + 4); }
};
// The fifth bits of q5_0 / q5_1: byte i of the result is 16 when bit i of the 32-bit qh is
// set (qh's byte i / 8 spread over 8 bytes, each tested against its own bit).
HWY_INLINE __m256i FifthBits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

struct Q5_0Codes {
  static constexpr size_t kBytes = 22;
  static constexpr bool kHalfScales = true;
  static constexpr bool kSigned = true, kHasOffset = false;
  static constexpr int kBias = 16;  // Codes c - 16, as q4_0's.
  static HWY_INLINE float Scale(const uint8_t* b) { return HalfAt(b); }
  static HWY_INLINE float Offset(const uint8_t*) { return 0.0f; }
  static HWY_INLINE __m256i UnsignedCodes(const uint8_t* b) {
    return _mm256_or_si256(Nibbles16(b + 6), FifthBits(b + 2));
  }
  static HWY_INLINE __m256i Codes(const uint8_t* b) {
    return _mm256_sub_epi8(UnsignedCodes(b), _mm256_set1_epi8(kBias));
  }
};
struct Q5_1Codes {
  static constexpr size_t kBytes = 24;
  static constexpr bool kHalfScales = true;
  static constexpr bool kSigned = false, kHasOffset = true;
  static constexpr int kBias = 0;
  static HWY_INLINE float Scale(const uint8_t* b) { return HalfAt(b); }
  static HWY_INLINE float Offset(const uint8_t* b) { return HalfAt(b + 2); }
  static HWY_INLINE __m256i Codes(const uint8_t* b) {
    return _mm256_or_si256(Nibbles16(b + 8), FifthBits(b + 4));
  }
};
alignas(16) inline constexpr int8_t kIq4Book[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                    1,    13,   25,  38,  53,  69,  89,  113};
alignas(16) inline constexpr int8_t kFp4Doubled[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                                       0, -1, -2, -3, -4, -6, -8, -12};
struct Iq4NlCodes {
  static constexpr size_t kBytes = 18;
  static constexpr bool kHalfScales = true;
  static constexpr bool kSigned = true, kHasOffset = false;
  static constexpr int kBias = 0;
  static HWY_INLINE float Scale(const uint8_t* b) { return HalfAt(b); }
  static HWY_INLINE float Offset(const uint8_t*) { return 0.0f; }
  static HWY_INLINE __m256i Codes(const uint8_t* b) { return Lookup16(kIq4Book, b + 2); }
};
struct Mxfp4Codes {
  static constexpr size_t kBytes = 17;
  static constexpr bool kHalfScales = false;
  static constexpr bool kSigned = true, kHasOffset = false;
  static constexpr int kBias = 0;
  // 2^(e - 128): the E8M0 scale of the doubled FP4 values, normal for e >= 2.
  static HWY_INLINE float Scale(const uint8_t* b) {
    const uint32_t bits =
        b[0] >= 2 ? static_cast<uint32_t>(b[0] - 1) << 23 : 0x00400000u >> (2 - b[0]);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  static HWY_INLINE float Offset(const uint8_t*) { return 0.0f; }
  static HWY_INLINE __m256i Codes(const uint8_t* b) { return Lookup16(kFp4Doubled, b + 1); }
};
template <>
struct Kernel<QuantFormat::kQ8_0> : Block32Kernel<Q8_0Codes> {};
template <>
struct Kernel<QuantFormat::kQ4_0> : Block32Kernel<Q4_0Codes> {};
template <>
struct Kernel<QuantFormat::kQ4_1> : Block32Kernel<Q4_1Codes> {};
template <>
struct Kernel<QuantFormat::kQ5_0> : Block32Kernel<Q5_0Codes> {};
template <>
struct Kernel<QuantFormat::kQ5_1> : Block32Kernel<Q5_1Codes> {};
template <>
struct Kernel<QuantFormat::kIQ4_NL> : Block32Kernel<Iq4NlCodes> {};
template <>
struct Kernel<QuantFormat::kMXFP4> : Block32Kernel<Mxfp4Codes> {};

// The int16 in lane j of each 128-bit half of v, broadcast over that half (pshufb with a
// constant mask once j is known at compile time).
HWY_INLINE __m256i BroadcastI16(__m256i v, int lo_j, int hi_j) {
  const __m256i mask =
      _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((2 * hi_j + 1) << 8 | 2 * hi_j)),
                       _mm_set1_epi16(static_cast<int16_t>((2 * lo_j + 1) << 8 | 2 * lo_j)));
  return _mm256_shuffle_epi8(v, mask);
}

// Q4_K's and Q5_K's 12 bytes of packed 6-bit scales and minimums (bytes 4-15 of a block,
// after d and dmin): `scales` gets sc0..sc7 as int16 in both 128-bit halves, `mins` gets m0,
// m0, m1, m1, ..., m7, m7 (one per 16 activations, as the activation sums). With u0, u1, u2
// the three 4-byte words: sc0-3 = u0 & 63, m0-3 = u1 & 63, sc4-7 = (u2 & 15) | (u0 >> 6) << 4,
// m4-7 = (u2 >> 4 & 15) | (u1 >> 6) << 4, bytewise; computed in one 16-byte register.
HWY_INLINE void ScalesMinsK4(const uint8_t* block, __m256i* scales, __m256i* mins) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block));
  // [u0 | u2 | u1 | u2] and [0 | u0 | 0 | u1] (a negative index gives 0).
  const __m128i low = _mm_shuffle_epi8(v, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11,
                                                        12, 13, 14, 15));
  const __m128i top = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1,
                                                        -1, 8, 9, 10, 11));
  // The last word's nibbles shifted down (bits crossing into a byte are masked off).
  const __m128i low_bits = _mm_and_si128(_mm_srlv_epi32(low, _mm_setr_epi32(0, 0, 0, 4)),
                                         _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f,
                                                        0x0f0f0f0f));
  // Bits 6-7 of u0 / u1 to bits 4-5.
  const __m128i high_bits = _mm_and_si128(_mm_srli_epi32(top, 2), _mm_set1_epi8(0x30));
  const __m128i bytes = _mm_or_si128(low_bits, high_bits);  // sc0..sc7, m0..m7.
  *scales = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
      bytes, _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7)));
  *mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
      bytes, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
}

// Q4_K (kBits 4) and Q5_K (kBits 5): w = d·sc_s·c - dmin·m_s per sub-block s of 32. The
// integer sums are scaled by sc_s in int32 (one activation scale per 256), the minimums
// meet the activations' sums per 16.
template <int kBits>
struct KernelK45 {
  static constexpr bool kEnabled = true;
  static constexpr size_t kBlock = 256, kBytes = kBits == 4 ? 144 : 176, kAct = 256;
  template <size_t R, size_t T>
  static HWY_INLINE void Tile(const uint8_t* const* b, const Span* x, __m256* acc, float*) {
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      __m256i scales, mins;
      ScalesMinsK4(b[r], &scales, &mins);
      const float d = HalfAt(b[r]), dmin = HalfAt(b[r] + 2);
      const uint8_t* q = b[r] + (kBits == 4 ? 16 : 48);
      __m256i high = kBits == 5 ? Load32(b[r] + 16) : _mm256_setzero_si256();
      __m256i isum[T];  // On AVX-512: FoldHalves(wide) after the runs.
#if MOEX_AVX512_TARGET
      __m512i wide[T];
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) wide[t] = _mm512_setzero_si512();
#else
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#endif
#if MOEX_AVX512_TARGET
      // The pair's 64 codes meet 64 contiguous activations in one vector; codes and scales
      // are built in 512-bit registers (the low half the 256-bit path's sub-block 2j, the
      // high half its sub-block 2j + 1).
      const __m512i sc = _mm512_castsi256_si512(scales);
      // Fifth bits: byte l's bit 2j for sub-block 2j, bit 2j + 1 for 2j + 1, moved to 0x10.
      __m512i fifth = kBits == 5 ? _mm512_broadcast_i64x4(high) : _mm512_setzero_si512();
#pragma GCC unroll 4
      for (size_t j = 0; j < 4; ++j) {
        __m512i c = NibblePairs(q + 32 * j);
        if constexpr (kBits == 5) {
          const __m512i at4 = _mm512_mask_slli_epi16(_mm512_slli_epi16(fifth, 3), 0x0000FFFFu,
                                                     fifth, 4);
          c = _mm512_or_si512(c, _mm512_and_si512(at4, _mm512_set1_epi8(0x10)));
          fifth = _mm512_srli_epi16(fifth, 2);
        }
        const int lo_j = static_cast<int>(2 * j);
        const __m512i s = BroadcastQuartersI16(sc, lo_j, lo_j, lo_j + 1, lo_j + 1);
#pragma GCC unroll 8
        for (size_t t = 0; t < T; ++t)
          wide[t] = AddMadd(wide[t], MulU(c, Load64(x[t].q + 64 * j)), s);
      }
#else
#pragma GCC unroll 8
      for (size_t j = 0; j < 4; ++j) {  // Sub-blocks 2j (low nibbles) and 2j + 1 (high).
        const __m256i raw = Load32(q + 32 * j);
        __m256i lo = Nibbles(raw), hi = HighNibbles(raw);
        if constexpr (kBits == 5) {
          const __m256i bit = _mm256_set1_epi8(0x10);
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(high, 4), bit));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(high, 3), bit));
          high = _mm256_srli_epi16(high, 2);
        }
        const int lo_j = static_cast<int>(2 * j), hi_j = lo_j + 1;
        const __m256i s_lo = BroadcastI16(scales, lo_j, lo_j),
                      s_hi = BroadcastI16(scales, hi_j, hi_j);
#pragma GCC unroll 8
        for (size_t t = 0; t < T; ++t) {
          isum[t] = AddMadd(isum[t], MulU(lo, Load32(x[t].q + 64 * j)), s_lo);
          isum[t] = AddMadd(isum[t], MulU(hi, Load32(x[t].q + 64 * j + 32)), s_hi);
        }
      }
#endif
#if MOEX_AVX512_TARGET
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) isum[t] = FoldHalves(wide[t]);
#endif
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) {
        const float dx = x[t].d[0];
        const __m256i m = _mm256_madd_epi16(mins, Load32(x[t].s));
        __m256 v =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * dx), acc[r * T + t]);
        acc[r * T + t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(-(dmin * dx)), v);
      }
    }
  }
};
template <>
struct Kernel<QuantFormat::kQ4_K> : KernelK45<4> {};
template <>
struct Kernel<QuantFormat::kQ5_K> : KernelK45<5> {};

// The 16-weight sub-block scales of q2_K/q3_K/q6_K as one int16 vector (sub-blocks 0..7 in
// the low 128-bit half, 8..15 in the high one): `BroadcastI16` of its half-duplicated form
// gives activation run k's [scale 2k ×8 | scale 2k + 1 ×8].
HWY_INLINE __m256i HalfScales(__m256i scales, size_t h) {
  return h == 0 ? _mm256_permute2x128_si256(scales, scales, 0x00)
                : _mm256_permute2x128_si256(scales, scales, 0x11);
}

// Q6_K: w = d·sc_s·(c - 32) per sub-block s of 16 (int8 sc), 6-bit codes split into ql
// (low 4 bits) and qh (2 high bits): in half h, quarter p, weight l < 32 has ql byte
// l + 32(p & 1) (low nibble for p < 2) and qh byte l's bits 2p, 2p + 1; its sub-block is
// 8h + 2p + l / 16.
template <>
struct Kernel<QuantFormat::kQ6_K> {
  static constexpr bool kEnabled = true;
  static constexpr size_t kBlock = 256, kBytes = 210, kAct = 256;
  template <size_t R, size_t T>
  static HWY_INLINE void Tile(const uint8_t* const* b, const Span* x, __m256* acc, float*) {
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const float d = HalfAt(b[r] + 208);
      // sc0..sc7 in the low half, sc8..sc15 in the high half.
      const __m256i scales =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[r] + 192)));
      __m256i isum[T];  // On AVX-512: FoldHalves(wide) after the runs.
#if MOEX_AVX512_TARGET
      __m512i wide[T];
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) wide[t] = _mm512_setzero_si512();
#else
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#endif
#if MOEX_AVX512_TARGET
      // Runs p and p + 1 (64 contiguous activations) in one vector, codes and scales built
      // in 512-bit registers: the low half is quarter p's codes, the high half p + 1's.
      const __m512i sc = _mm512_castsi256_si512(scales);
      const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
      for (size_t h = 0; h < 2; ++h) {
        const __m512i ql = Load64(b[r] + 64 * h);  // ql0 | ql1.
        const __m512i qh = _mm512_broadcast_i64x4(Load32(b[r] + 128 + 32 * h));
        // Quarters 0 | 1: low nibbles, qh bits 0-1 | 2-3 moved to bits 4-5.
        const __m512i qh01 = _mm512_mask_slli_epi16(_mm512_slli_epi16(qh, 2), 0x0000FFFFu, qh, 4);
        // Quarters 2 | 3: high nibbles, qh bits 4-5 | 6-7 moved to bits 4-5.
        const __m512i qh23 = _mm512_mask_srli_epi16(qh, 0xFFFF0000u, qh, 2);
        const __m512i cc[2] = {
            _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(qh01, m2)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                            _mm512_and_si512(qh23, m2))};
#pragma GCC unroll 2
        for (size_t p = 0; p < 4; p += 2) {
          const size_t k = 4 * h + p;
          const int s0 = static_cast<int>(8 * h + 2 * p);
          const __m512i s = BroadcastQuartersI16(sc, s0, s0 + 1, s0 + 2, s0 + 3);
#pragma GCC unroll 8
          for (size_t t = 0; t < T; ++t)
            wide[t] = AddMadd(wide[t], MulU(cc[p / 2], Load64(x[t].q + 32 * k)), s);
        }
      }
#else
      const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 8
      for (size_t h = 0; h < 2; ++h) {
        const __m256i ql0 = Load32(b[r] + 64 * h), ql1 = Load32(b[r] + 64 * h + 32);
        const __m256i qh = Load32(b[r] + 128 + 32 * h);
        // This half's scales sc[8h .. 8h + 7] in both 128-bit halves.
        const __m256i half_scales = HalfScales(scales, h);
        const __m256i c[4] = {
            _mm256_or_si256(_mm256_and_si256(ql0, m4),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2)),
            _mm256_or_si256(_mm256_and_si256(ql1, m4),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2)),
            _mm256_or_si256(HighNibbles(ql0), _mm256_and_si256(qh, m2)),
            _mm256_or_si256(HighNibbles(ql1), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2))};
#pragma GCC unroll 8
        for (size_t p = 0; p < 4; ++p) {
          const size_t k = 4 * h + p;  // Activation run of 32: sub-blocks 2k and 2k + 1.
          const __m256i s =
              BroadcastI16(half_scales, static_cast<int>(2 * p), static_cast<int>(2 * p + 1));
#pragma GCC unroll 8
          for (size_t t = 0; t < T; ++t) {
            isum[t] = AddMadd(isum[t], MulU(c[p], Load32(x[t].q + 32 * k)), s);
          }
        }
      }
#endif
#if MOEX_AVX512_TARGET
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) isum[t] = FoldHalves(wide[t]);
#endif
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) {
        const float dx = x[t].d[0];
        const __m256i bias = _mm256_madd_epi16(scales, Load32(x[t].s));
        __m256 v =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * dx), acc[r * T + t]);
        acc[r * T + t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(bias), _mm256_set1_ps(-32.0f * (d * dx)), v);
      }
    }
  }
};

// Q2_K and Q3_K share the code layout: per half h of 128 weights, 32 bytes of qs hold four
// 2-bit planes (shift 2j is activation run 4h + j, its bytes 0-15 and 16-31 two sub-blocks
// of 16). Q2_K: w = d·sc·c - dmin·m (4-bit sc and m per sub-block). Q3_K: a third bit per
// weight in hmask (bit 4h + j of byte l), w = d·(sc - 32)·(c - 4) with c = two bits | the
// third << 2 and 6-bit sc.
template <bool kQ3>
struct KernelK23 {
  static constexpr bool kEnabled = true;
  static constexpr size_t kBlock = 256, kBytes = kQ3 ? 110 : 84, kAct = 256;
  // Q3_K's 16 scales from 12 bytes: low 4 bits from bytes 0-7 (nibble j / 8 of byte j % 8),
  // high 2 bits from bytes 8-11 (bits 2(j / 4) of byte 8 + j % 4), minus 32; four per word.
  static HWY_INLINE __m256i Q3Scales(const uint8_t* packed) {
    uint32_t u[3];
    std::memcpy(u, packed, 12);
    const uint32_t low = 0x0f0f0f0fu, two = 0x03030303u;
    const uint32_t w0 = (u[0] & low) | ((u[2] & two) << 4);
    const uint32_t w1 = (u[1] & low) | (((u[2] >> 2) & two) << 4);
    const uint32_t w2 = ((u[0] >> 4) & low) | (((u[2] >> 4) & two) << 4);
    const uint32_t w3 = ((u[1] >> 4) & low) | (((u[2] >> 6) & two) << 4);
    const __m256i wide = _mm256_cvtepu8_epi16(_mm_setr_epi32(
        static_cast<int>(w0), static_cast<int>(w1), static_cast<int>(w2), static_cast<int>(w3)));
    return _mm256_sub_epi16(wide, _mm256_set1_epi16(32));
  }
  template <size_t R, size_t T>
  static HWY_INLINE void Tile(const uint8_t* const* b, const Span* x, __m256* acc, float*) {
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* qs = b[r] + (kQ3 ? 32 : 16);
      __m256i scales, offsets;  // Per sub-block: the code scale and what multiplies its sum.
      float d, offset_scale;
      if constexpr (kQ3) {
        scales = Q3Scales(b[r] + 96);
        offsets = scales;
        d = HalfAt(b[r] + 108);
        offset_scale = -4.0f * d;
      } else {
        const __m256i raw =
            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[r])));
        scales = _mm256_and_si256(raw, _mm256_set1_epi16(0x0f));
        offsets = _mm256_srli_epi16(raw, 4);
        d = HalfAt(b[r] + 80);
        offset_scale = -HalfAt(b[r] + 82);
      }
      __m256i isum[T];
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
      __m256i high = kQ3 ? Load32(b[r]) : _mm256_setzero_si256();
#pragma GCC unroll 8
      for (size_t h = 0; h < 2; ++h) {
        const __m256i half_scales = HalfScales(scales, h);
        __m256i planes = Load32(qs + 32 * h);
#pragma GCC unroll 8
        for (size_t j = 0; j < 4; ++j) {
          __m256i c = _mm256_and_si256(planes, _mm256_set1_epi8(3));
          planes = _mm256_srli_epi16(planes, 2);
          if constexpr (kQ3) {
            c = _mm256_or_si256(c,
                                _mm256_and_si256(_mm256_slli_epi16(high, 2), _mm256_set1_epi8(4)));
            high = _mm256_srli_epi16(high, 1);
          }
          const size_t k = 4 * h + j;
          const __m256i s =
              BroadcastI16(half_scales, static_cast<int>(2 * j), static_cast<int>(2 * j + 1));
#pragma GCC unroll 8
          for (size_t t = 0; t < T; ++t) {
            isum[t] = AddMadd(isum[t], MulU(c, Load32(x[t].q + 32 * k)), s);
          }
        }
      }
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) {
        const float dx = x[t].d[0];
        const __m256i o = _mm256_madd_epi16(offsets, Load32(x[t].s));
        const __m256 v =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * dx), acc[r * T + t]);
        acc[r * T + t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(o), _mm256_set1_ps(offset_scale * dx), v);
      }
    }
  }
};
template <>
struct Kernel<QuantFormat::kQ2_K> : KernelK23<false> {};
template <>
struct Kernel<QuantFormat::kQ3_K> : KernelK23<true> {};

// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (ls - 32) and iq4 codebook values.
template <>
struct Kernel<QuantFormat::kIQ4_XS> {
  static constexpr bool kEnabled = true;
  static constexpr size_t kBlock = 256, kBytes = 136, kAct = 256;
  template <size_t R, size_t T>
  static HWY_INLINE void Tile(const uint8_t* const* b, const Span* x, __m256* acc, float*) {
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const float d = HalfAt(b[r]);
      const unsigned scales_h = static_cast<unsigned>(b[r][2] | (b[r][3] << 8));
      __m256i isum[T];
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (size_t s = 0; s < 8; ++s) {
        const int ls = ((b[r][4 + s / 2] >> (4 * (s % 2))) & 0xf) |
                       static_cast<int>(((scales_h >> (2 * s)) & 3) << 4);
        const __m256i scale = _mm256_set1_epi16(static_cast<int16_t>(ls - 32));
        const __m256i c = Lookup16(kIq4Book, b[r] + 8 + 16 * s);
#pragma GCC unroll 8
        for (size_t t = 0; t < T; ++t) {
          isum[t] = AddMadd(isum[t], MulS(c, Load32(x[t].q + 32 * s)), scale);
        }
      }
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) {
        acc[r * T + t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * x[t].d[0]),
                                         acc[r * T + t]);
      }
    }
  }
};


// Eight rows of a q4_0 or q8_0 matrix regrouped for 32-bit lanes (kernels/interleave.h): per
// block the eight rows' f16 scales, then their codes four bytes of a row at a time (chunk j:
// rows 0..7's code bytes 4j..4j+3). A register of codes then holds four codes of each row,
// and with four activation bytes broadcast to every lane, maddubs + madd leaves lane r
// with row r's partial dot: a block's eight dots need no horizontal reduction, and the
// eight scales convert in one instruction. Block<T>(b, x, k, acc) adds block k's dots of
// the eight rows with T tokens to acc[t] (lane r: row r).
template <QuantFormat F>
struct Interleaved8;

HWY_INLINE __m256i Broadcast4(const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, 4);
  return _mm256_set1_epi32(v);
}

template <>
struct Interleaved8<QuantFormat::kQ4_0> {
  static constexpr size_t kBlockBytes = InterleavedBlockBytes(DType::kQ4_0);
  template <size_t T>
  static HWY_INLINE void Block(const uint8_t* b, const Span* x, size_t k, __m256* acc) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    __m256i lo[4], hi[4];
#pragma GCC unroll 4
    for (size_t j = 0; j < 4; ++j) {
      const __m256i v = Load32(b + 16 + 32 * j);
      lo[j] = Nibbles(v);      // Codes 4j .. 4j + 3 of each row.
      hi[j] = HighNibbles(v);  // Codes 16 + 4j ...
    }
#pragma GCC unroll 4
    for (size_t t = 0; t < T; ++t) {
      const int8_t* q = x[t].q + 32 * k;
      // Unsigned codes (0..15) times q: each pair sum is at most 2 * 15 * 127, so the eight
      // int16 additions stay below 2^15.
      // With VNNI the products go straight into int32 lanes instead (the same sums).
#if HWY_TARGET == HWY_AVX3_DL
      __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (size_t j = 0; j < 4; ++j) {
        sum = AddDotU(sum, lo[j], Broadcast4(q + 4 * j));
        sum = AddDotU(sum, hi[j], Broadcast4(q + 16 + 4 * j));
      }
#else
      __m256i s16 = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (size_t j = 0; j < 4; ++j) {
        s16 = _mm256_add_epi16(s16, MulU(lo[j], Broadcast4(q + 4 * j)));
        s16 = _mm256_add_epi16(s16, MulU(hi[j], Broadcast4(q + 16 + 4 * j)));
      }
      const __m256i sum = Widen(s16);
#endif
      // The codes' offset: sum (c - 8) q = sum c q - 8 sum q.
      const int qsum = x[t].s[2 * k] + x[t].s[2 * k + 1];
      const __m256i isum = _mm256_sub_epi32(sum, _mm256_set1_epi32(Q4_0Codes::kBias * qsum));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                               _mm256_mul_ps(d, _mm256_set1_ps(x[t].d[k])), acc[t]);
    }
  }
};

template <>
struct Interleaved8<QuantFormat::kQ8_0> {
  static constexpr size_t kBlockBytes = InterleavedBlockBytes(DType::kQ8_0);
  template <size_t T>
  static HWY_INLINE void Block(const uint8_t* b, const Span* x, size_t k, __m256* acc) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    __m256i c[8];
#pragma GCC unroll 8
    for (size_t j = 0; j < 8; ++j) c[j] = Load32(b + 16 + 32 * j);
#pragma GCC unroll 4
    for (size_t t = 0; t < T; ++t) {
      const int8_t* q = x[t].q + 32 * k;
      // Signed codes: a pair sum reaches 2 * 128 * 127, so each chunk widens to int32 alone.
      __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (size_t j = 0; j < 8; ++j) isum = AddDotS(isum, c[j], Broadcast4(q + 4 * j));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                               _mm256_mul_ps(d, _mm256_set1_ps(x[t].d[k])), acc[t]);
    }
  }
};

// acc[t] (lane r: row r of the group) = the eight rows' dots with T tokens over `blocks`
// blocks of one interleaved group.
template <QuantFormat F, size_t T>
HWY_INLINE void InterleavedDot(const uint8_t* group, size_t blocks, const Span* x, __m256* acc) {
  using K = Interleaved8<F>;
#pragma GCC unroll 4
  for (size_t t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (size_t k = 0; k < blocks; ++k) {
    const uint8_t* b = group + k * K::kBlockBytes;
    for (size_t line = 0; line < K::kBlockBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(b) + kPrefetchBytes + line, _MM_HINT_T0);
    K::template Block<T>(b, x, k, acc);
  }
}

// out[r * ldo + t] = dot(row r, token t) over `blocks` blocks of R rows and T tokens.
template <QuantFormat F, size_t R, size_t T>
HWY_INLINE void BlocksDot(const uint8_t* const* rows, size_t blocks, const Span* x, float* out,
                          size_t ldo) {
  using K = Kernel<F>;
  __m256 acc[R * T];
  float corr[R * T];
#pragma GCC unroll 8
  for (size_t i = 0; i < R * T; ++i) {
    acc[i] = _mm256_setzero_ps();
    corr[i] = 0.0f;
  }
  const uint8_t* b[R];
  Span xs[T];
  for (size_t k = 0; k < blocks; ++k) {
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      b[r] = rows[r] + k * K::kBytes;
      for (size_t line = 0; line < K::kBytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(b[r]) + kPrefetchBytes + line, _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < T; ++t) xs[t] = x[t].Advance(k * K::kBlock, K::kAct);
    K::template Tile<R, T>(b, xs, acc, corr);
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (size_t t = 0; t < T; ++t) out[r * ldo + t] = HSum(acc[r * T + t]) + corr[r * T + t];
}

// The same for n tokens, in tiles of up to 4 (every tile gives a pair the same operations).
template <QuantFormat F, size_t R>
HWY_INLINE void BlocksDotN(const uint8_t* const* rows, size_t blocks, size_t n, const Span* x,
                           float* out) {
  size_t t = 0;
#if MOEX_AVX512_TARGET
  // Prefill of the 256-weight formats: each row alone with eight tokens (decoding a block's
  // codes once per eight tokens; two rows of eight would spill the 32 vector registers).
  if constexpr (Kernel<F>::kBlock == 256) {
    const size_t eights = n / 8 * 8;
    if (eights > 0) {
      for (size_t r = 0; r < R; ++r)
        for (size_t u = 0; u < eights; u += 8)
          BlocksDot<F, 1, 8>(rows + r, blocks, x + u, out + r * n + u, n);
      t = eights;
    }
  }
#endif
  for (; t + 4 <= n; t += 4) BlocksDot<F, R, 4>(rows, blocks, x + t, out + t, n);
  switch (n - t) {
    case 3:
      return BlocksDot<F, R, 3>(rows, blocks, x + t, out + t, n);
    case 2:
      return BlocksDot<F, R, 2>(rows, blocks, x + t, out + t, n);
    case 1:
      return BlocksDot<F, R, 1>(rows, blocks, x + t, out + t, n);
    default:
      return;
  }
}

}  // namespace moex::kernels::HWY_NAMESPACE::int8
HWY_AFTER_NAMESPACE();

#endif  // MOEX_KERNELS_INT8_DOT_INL_H_

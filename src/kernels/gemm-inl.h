// Per-target dot-form GEMM: out[t, r] = dot(row(r), x[t]) for a range of weight rows and all
// tokens. Batches of up to 16 tokens widen weights in registers straight from memory (decode
// is bound by memory bandwidth; one or two tokens walk rows in the CPU's decode order);
// larger batches widen a group of rows to an f32 scratch once and reuse it across register
// tiles of tokens. Every path goes through DotTile, so they agree bitwise.
#if defined(MOEX_KERNELS_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOEX_KERNELS_GEMM_INL_H_
#undef MOEX_KERNELS_GEMM_INL_H_
#else
#define MOEX_KERNELS_GEMM_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <vector>

#include "kernels/decode_order.h"
#include "kernels/simd-inl.h"
#include "kernels/simd_config.h"

HWY_BEFORE_NAMESPACE();
namespace moex::kernels::HWY_NAMESPACE {

// Register tile: kTileRows weight rows x kTileTokens tokens of accumulators.
constexpr size_t kTileRows = 4;
#if MOEX_AVX512_TARGET
constexpr size_t kTileTokens = 6;  // 24 accumulators + 6 inputs + 1 weight of 32 registers.
#elif HWY_TARGET == HWY_AVX2
constexpr size_t kTileTokens = 2;  // 16 registers.
#else
constexpr size_t kTileTokens = 2;
#endif
// Batches up to this size stream weights straight from memory (no scratch), kDirectRows
// rows at a time: more concurrent streams keep more cache lines in flight per core.
constexpr size_t kDirectMaxTokens = 2;
#if MOEX_AVX512_TARGET
constexpr size_t kDirectRows = 8;  // Measured: ~20 % more decode bandwidth than 4.
#else
constexpr size_t kDirectRows = 4;  // 16 registers: 8 rows x 2 tokens would spill.
#endif
// Batches up to this size read weights straight from memory in kTileRows x kTileTokens
// register tiles (an expert's share of a short prefill, a small decode batch): measured on
// Zen 5, 16 experts x 8 tokens went from 56 to 135-190 GFLOP/s against the scratch path.
constexpr size_t kDirectFewTokens = 16;
// Distance of the software prefetch in the sequential decode order (DecodeStreamOrder):
// measured on Zen 5, 1 KiB ahead streams 5–10 % faster than no prefetch, 2 KiB no better.
constexpr size_t kDecodePrefetchBytes = 1024;
// Hardware prefetch works within pages of this size.
constexpr size_t kPageBytes = 4096;
// Tokens per cache block in the scratch path (their inputs stay in L2).
constexpr size_t kTokenBlock = 96;

HWY_INLINE float* GemmScratch(size_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < floats) scratch.resize(floats);
  return scratch.data();
}

// out[t * ldo + r] = dot(row(r), x + t * ldx) over k elements, r in [r0, r1), t < n.
template <DType kT, class RowFn>
HWY_INLINE void DotRows(const RowFn& row, size_t r0, size_t r1, const float* x, size_t ldx,
                        size_t n, size_t k, float* out, size_t ldo) {
  const DF df;
  const size_t N = hn::Lanes(df);
  if (n <= kDirectMaxTokens) {
    const float* xs[kDirectMaxTokens];
    for (size_t t = 0; t < n; ++t) xs[t] = x + t * ldx;
    // Sequential order only where rows are contiguous (one forward stream); strided rows
    // (expert gate/up rows inside neuron records) keep the interleaved walk.
    const bool contiguous = r1 - r0 < 2 || static_cast<size_t>(row(r0 + 1) - row(r0)) ==
                                               DTypeBytes(kT, static_cast<int64_t>(k));
    if (contiguous && GetDecodeStreamOrder() == DecodeStreamOrder::kSequential) {
      // Two forward streams, over the two halves of the range: two independent FMA chains
      // per step (one chain alone is latency bound below the memory's rate).
      const size_t half = (r1 - r0) / 2;
      for (size_t j = 0; j < half; ++j) {
        const std::byte* ws[2] = {row(r0 + j), row(r0 + half + j)};
        float tile[kDirectMaxTokens * 2];
        DotTileN<kT, 2, kDirectMaxTokens, kDecodePrefetchBytes>(ws, xs, n, k, tile, 2);
        for (size_t t = 0; t < n; ++t) {
          out[t * ldo + r0 + j] = tile[t * 2];
          out[t * ldo + r0 + half + j] = tile[t * 2 + 1];
        }
      }
      if (2 * half < r1 - r0) {
        const std::byte* ws[1] = {row(r1 - 1)};
        DotTileN<kT, 1, kDirectMaxTokens, kDecodePrefetchBytes>(ws, xs, n, k, out + r1 - 1, ldo);
      }
      return;
    }
    size_t r = r0;
    // The L2 streamer follows one forward stream per 4 KiB page, so rows shorter than half
    // a page are interleaved: a block of s * kDirectRows consecutive rows is done as s
    // tiles of rows s apart, each tile reading kDirectRows different pages, and the next
    // tile continues the same pages where the last one stopped.
    const size_t row_bytes = static_cast<size_t>(row(1) - row(0));
    const size_t s = row_bytes == 0 ? 1 : std::clamp<size_t>(kPageBytes / row_bytes, 1, 8);
    if (s > 1) {
      for (; r + s * kDirectRows <= r1; r += s * kDirectRows) {
        for (size_t phase = 0; phase < s; ++phase) {
          const std::byte* ws[kDirectRows];
          for (size_t i = 0; i < kDirectRows; ++i) ws[i] = row(r + phase + i * s);
          float tile[kDirectMaxTokens * kDirectRows];
          DotTileN<kT, kDirectRows, kDirectMaxTokens>(ws, xs, n, k, tile, kDirectRows);
          for (size_t t = 0; t < n; ++t) {
            for (size_t i = 0; i < kDirectRows; ++i) {
              out[t * ldo + r + phase + i * s] = tile[t * kDirectRows + i];
            }
          }
        }
      }
    }
    for (; r + kDirectRows <= r1; r += kDirectRows) {
      const std::byte* ws[kDirectRows];
      for (size_t i = 0; i < kDirectRows; ++i) ws[i] = row(r + i);
      DotTileN<kT, kDirectRows, kDirectMaxTokens>(ws, xs, n, k, out + r, ldo);
    }
    for (; r < r1; ++r) {
      const std::byte* ws[1] = {row(r)};
      DotTileN<kT, 1, kDirectMaxTokens>(ws, xs, n, k, out + r, ldo);
    }
    return;
  }
  if (n <= kDirectFewTokens) {
    // A few tokens (an expert's share of a short prefill): weights straight from memory in
    // register tiles; widening rows to a scratch costs as much as the few FMAs each gets.
    for (size_t r = r0; r < r1; r += kTileRows) {
      const size_t rows = std::min(kTileRows, r1 - r);
      const std::byte* ws[kTileRows];
      for (size_t i = 0; i < rows; ++i) ws[i] = row(r + i);
      for (size_t t = 0; t < n; t += kTileTokens) {
        const size_t tokens = std::min(kTileTokens, n - t);
        const float* xs[kTileTokens];
        for (size_t i = 0; i < tokens; ++i) xs[i] = x + (t + i) * ldx;
        float* o = out + t * ldo + r;
        if (rows == kTileRows) {
          DotTileN<kT, kTileRows, kTileTokens>(ws, xs, tokens, k, o, ldo);
        } else {
          for (size_t i = 0; i < rows; ++i) {
            DotTileN<kT, 1, kTileTokens>(ws + i, xs, tokens, k, o + i, ldo);
          }
        }
      }
    }
    return;
  }
  const size_t kpad = (k + N - 1) / N * N;
  float* scratch = kT == DType::kF32 ? nullptr : GemmScratch(kTileRows * kpad);
  for (size_t tb = 0; tb < n; tb += kTokenBlock) {
    const size_t te = std::min(n, tb + kTokenBlock);
    for (size_t r = r0; r < r1; r += kTileRows) {
      const size_t rows = std::min(kTileRows, r1 - r);
      const std::byte* ws[kTileRows];
      for (size_t i = 0; i < rows; ++i) {
        if constexpr (kT == DType::kF32) {
          ws[i] = row(r + i);
        } else {
          WidenRow<kT>(row(r + i), k, scratch + i * kpad);
          ws[i] = reinterpret_cast<const std::byte*>(scratch + i * kpad);
        }
      }
      for (size_t t = tb; t < te; t += kTileTokens) {
        const size_t tokens = std::min(kTileTokens, te - t);
        const float* xs[kTileTokens];
        for (size_t i = 0; i < tokens; ++i) xs[i] = x + (t + i) * ldx;
        float* o = out + t * ldo + r;
        if (rows == kTileRows) {
          DotTileN<DType::kF32, kTileRows, kTileTokens>(ws, xs, tokens, k, o, ldo);
        } else {
          for (size_t i = 0; i < rows; ++i) {
            DotTileN<DType::kF32, 1, kTileTokens>(ws + i, xs, tokens, k, o + i, ldo);
          }
        }
      }
    }
  }
}

}  // namespace moex::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOEX_KERNELS_GEMM_INL_H_

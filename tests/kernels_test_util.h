// Helpers shared by the kernels tests: random data, weight encoding, double-precision
// references and a loop over every compiled SIMD target.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "hwy/targets.h"
#include "kernels/decode_order.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

namespace moex::kernels::testing {

inline std::vector<float> RandomVector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Weights as stored for a dtype, and their exact f32 values (what the kernels must use).
struct Weights {
  std::vector<std::byte> bytes;
  std::vector<double> values;
};

// Decodes element i of a row of `cols` elements independently of the kernels.
inline double DecodeElement(const std::byte* row, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, row + 4 * i, 4);
      return f;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      return dtype == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
    }
    case DType::kQ8_0: {
      const std::byte* block = row + (i / kQ8BlockSize) * kQ8BlockBytes;
      uint16_t d;
      std::memcpy(&d, block, 2);
      return static_cast<double>(static_cast<int8_t>(block[2 + i % kQ8BlockSize])) * F16ToF32(d);
    }
    default:  // Other block formats: core's scalar decoders.
      return ElementToF32(dtype, row, i);
  }
}

// rows x cols random weights encoded row by row.
inline Weights MakeWeights(DType dtype, size_t rows, size_t cols, uint32_t seed,
                           float scale = 1.0f) {
  const std::vector<float> f = RandomVector(rows * cols, seed, scale);
  const size_t row_bytes = DTypeBytes(dtype, static_cast<int64_t>(cols));
  Weights w;
  w.bytes.resize(rows * row_bytes);
  w.values.resize(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    FromF32(&f[r * cols], dtype, static_cast<int64_t>(cols), &w.bytes[r * row_bytes]);
    for (size_t c = 0; c < cols; ++c)
      w.values[r * cols + c] = DecodeElement(&w.bytes[r * row_bytes], dtype, c);
  }
  return w;
}

inline bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs fn once per SIMD target compiled into the kernels and supported here, with the
// dispatcher pinned to it; restores normal dispatch afterwards.
// Runs fn once per SIMD target and decode row order (kernels/decode_order.h), so every
// kernel test covers both orders whatever CPU runs it; restores the CPU's defaults.
inline void ForEachTarget(const std::function<void()>& fn) {
  const std::vector<int64_t> targets = AvailableSimdTargets();
  ASSERT_FALSE(targets.empty());
  const DecodeStreamOrder default_order = GetDecodeStreamOrder();
  for (int64_t target : targets) {
    for (DecodeStreamOrder order :
         {DecodeStreamOrder::kInterleaved, DecodeStreamOrder::kSequential}) {
      hwy::SetSupportedTargetsForTest(target);
      SetDecodeStreamOrder(order);
      SCOPED_TRACE(std::string("SIMD target ") + hwy::TargetName(target) + ", decode order " +
                   DecodeStreamOrderName(order));
      EXPECT_EQ(SimdTargetName(), hwy::TargetName(target));
      fn();
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  SetDecodeStreamOrder(default_order);
}

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0};

}  // namespace moex::kernels::testing

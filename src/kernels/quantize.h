// Weight quantisation to the kernel dtypes (for the expert packer, converters and tests).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace moex::kernels {

// GGML Q8_0: per block of 32, d = max|x| / 127 stored as f16 and q = round(x / d).
// n must be a multiple of 32; dst receives DTypeBytes(kQ8_0, n) bytes.
void QuantizeQ8_0(const float* src, int64_t n, std::byte* dst);

// Stores n f32 values as `dtype` (f32/f16/bf16 round to nearest even; block formats with
// core/quant_format.h's Quantize, n a multiple of the block).
void FromF32(const float* src, DType dtype, int64_t n, std::byte* dst);

}  // namespace moex::kernels

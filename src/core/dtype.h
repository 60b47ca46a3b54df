// Element types of weights and activations, and scalar conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace moex {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // GGML Q8_0: blocks of 32 int8 values with one f16 scale (34 bytes per block).
  // GGML's other block formats (core/quant_format.h), as weights of routed experts: the
  // kernels read them directly (kernels/quant_expert_ffn.cc); dense layers get them
  // dequantised to f32 at load. Rows hold whole blocks.
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kIQ4_NL,
  kIQ4_XS,
  kMXFP4,
};

// Q8_0 and every later value: GGML block formats, whose rows are whole blocks.
inline bool IsBlockQuantized(DType t) {
  return static_cast<uint8_t>(t) >= static_cast<uint8_t>(DType::kQ8_0);
}
// Float formats and Q8_0: the dtypes the dense kernels (Linear, ToF32's SIMD path) read.
inline bool IsLinearDType(DType t) {
  return static_cast<uint8_t>(t) <= static_cast<uint8_t>(DType::kQ8_0);
}
constexpr DType kLastDType = DType::kMXFP4;
// Elements per block: 1 for float formats.
int DTypeBlockElems(DType t);

constexpr int kQ8BlockSize = 32;
constexpr int kQ8BlockBytes = 34;

const char* DTypeName(DType t);
// Parses "f32", "f16", "bf16", "q8_0", or any GGML block format name ("q4_K", "mxfp4";
// case-insensitive); throws Error otherwise.
DType ParseDType(const std::string& name);

// Bytes taken by `count` consecutive elements. For block formats, count must be a multiple
// of the block size.
size_t DTypeBytes(DType t, int64_t count);

inline float BF16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round-to-nearest-even, as PyTorch and safetensors writers do; NaN stays NaN.
inline uint16_t F32ToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // Round-to-nearest-even, with overflow to infinity.

// Element i of a row of a block format other than Q8_0 (decodes the block holding it).
float BlockElementToF32(DType dtype, const std::byte* row, size_t i);

// Element i of a row of `dtype` values (any alignment), widened to f32 exactly: Q8_0's
// q * scale has at most 8 + 11 significant bits. The one scalar conversion every layer uses;
// kernels::ToF32 is its vectorised form and gives the same bits.
inline float ElementToF32(DType dtype, const std::byte* row, size_t i) {
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
      return dtype == DType::kBF16 ? BF16ToF32(h) : F16ToF32(h);
    }
    case DType::kQ8_0: {
      const std::byte* block = row + (i / kQ8BlockSize) * kQ8BlockBytes;
      uint16_t scale;
      std::memcpy(&scale, block, 2);
      return static_cast<float>(static_cast<int8_t>(block[2 + i % kQ8BlockSize])) * F16ToF32(scale);
    }
    default:
      return BlockElementToF32(dtype, row, i);
  }
}

// Widens n consecutive elements (block formats: n a multiple of the block) to f32, as
// ElementToF32.
void ConvertToF32(const std::byte* src, DType dtype, int64_t n, float* dst);

}  // namespace moex

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
};

constexpr int kQ8BlockSize = 32;
constexpr int kQ8BlockBytes = 34;

const char* DTypeName(DType t);
// Parses "f32", "f16", "bf16", "q8_0" (case-insensitive); throws Error otherwise.
DType ParseDType(const std::string& name);

// Bytes taken by `count` consecutive elements. For Q8_0, count must be a multiple of 32.
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

}  // namespace moex

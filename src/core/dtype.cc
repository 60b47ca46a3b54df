#include "core/dtype.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/quant_format.h"

namespace moex {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    default:
      if (const auto f = QuantFormatOf(t)) return QuantFormatName(*f);
  }
  return "?";
}

DType ParseDType(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "f32" || lower == "float32") return DType::kF32;
  if (lower == "f16" || lower == "float16") return DType::kF16;
  if (lower == "bf16" || lower == "bfloat16") return DType::kBF16;
  if (const auto f = ParseQuantFormat(lower)) return DTypeOf(*f);
  Fail("unknown dtype '", name, "' (expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, ",
       "q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs or mxfp4)");
}

size_t DTypeBytes(DType t, int64_t count) {
  switch (t) {
    case DType::kF32:
      return static_cast<size_t>(count) * 4;
    case DType::kF16:
    case DType::kBF16:
      return static_cast<size_t>(count) * 2;
    case DType::kQ8_0:
      Check(count % kQ8BlockSize == 0, "q8_0 row length ", count, " is not a multiple of 32");
      return static_cast<size_t>(count / kQ8BlockSize) * kQ8BlockBytes;
    default:
      return QuantBytes(*QuantFormatOf(t), count);
  }
}

int DTypeBlockElems(DType t) {
  const auto f = QuantFormatOf(t);
  return f ? Info(*f).block_elems : 1;
}

float BlockElementToF32(DType dtype, const std::byte* row, size_t i) {
  const QuantFormat f = *QuantFormatOf(dtype);
  const QuantFormatInfo& info = Info(f);
  float block[256];
  const size_t b = i / static_cast<size_t>(info.block_elems);
  Dequantize(f, reinterpret_cast<const uint8_t*>(row) + b * static_cast<size_t>(info.block_bytes),
             info.block_elems, block);
  return block[i % static_cast<size_t>(info.block_elems)];
}

void ConvertToF32(const std::byte* src, DType dtype, int64_t n, float* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (IsBlockQuantized(dtype) && dtype != DType::kQ8_0) {
    Dequantize(*QuantFormatOf(dtype), reinterpret_cast<const uint8_t*>(src), n, dst);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = ElementToF32(dtype, src, static_cast<size_t>(i));
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // Subnormal: normalise it.
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // Overflows to infinity after rounding.
  if (abs < 0x38800000u) {                        // Result is subnormal or zero.
    if (abs < 0x33000000u) return sign;           // Below half the smallest subnormal.
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14 + (112 - exponent) + ... maps to subnormal.
    uint32_t value = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (remainder > half || (remainder == half && (value & 1u))) ++value;
    return sign | static_cast<uint16_t>(value);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

}  // namespace moex

#include "kernels/quantize.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/quant_format.h"

namespace moex::kernels {

void QuantizeQ8_0(const float* src, int64_t n, std::byte* dst) {
  Quantize(QuantFormat::kQ8_0, src, n, reinterpret_cast<uint8_t*>(dst));
}

void FromF32(const float* src, DType dtype, int64_t n, std::byte* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = dtype == DType::kF16 ? F32ToF16(src[i]) : F32ToBF16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default:  // Q8_0 and the other block formats.
      Quantize(*QuantFormatOf(dtype), src, n, reinterpret_cast<uint8_t*>(dst));
      return;
  }
}

}  // namespace moex::kernels

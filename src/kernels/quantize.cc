#include "kernels/quantize.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace moex::kernels {

void QuantizeQ8_0(const float* src, int64_t n, std::byte* dst) {
  Check(n % kQ8BlockSize == 0, "QuantizeQ8_0: ", n, " is not a multiple of 32");
  for (int64_t b = 0; b < n / kQ8BlockSize; ++b) {
    const float* x = src + b * kQ8BlockSize;
    std::byte* out = dst + b * kQ8BlockBytes;
    float amax = 0.0f;
    for (int i = 0; i < kQ8BlockSize; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    // Dividing by the f32 scale (not its f16 rounding) matches GGML's reference quantiser.
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = F32ToF16(d);
    std::memcpy(out, &dh, 2);
    for (int i = 0; i < kQ8BlockSize; ++i) {
      const long q = std::lround(x[i] * inv);
      out[2 + i] = static_cast<std::byte>(static_cast<int8_t>(q < -127 ? -127 : q > 127 ? 127 : q));
    }
  }
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
    case DType::kQ8_0:
      QuantizeQ8_0(src, n, dst);
      return;
  }
}

}  // namespace moex::kernels

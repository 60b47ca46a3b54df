#include "core/dtype.h"

#include <string>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace moex {
namespace {

TEST(DTypeTest, BF16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  // 1 + 2^-8 lies exactly halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(F32ToBF16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between mantissas 1 and 2: ties go to 2.
  EXPECT_EQ(F32ToBF16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(BF16ToF32(0xc000), -2.0f);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = F16ToF32(bits);
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), bits) << "half bits " << h;
  }
}

TEST(DTypeTest, F16KnownValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // Smallest subnormal.
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);               // Largest finite.
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);               // Rounds to infinity.
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // Tie with zero goes to even (0).
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeBytes(DType::kBF16, 10), 20u);
  EXPECT_EQ(DTypeBytes(DType::kQ8_0, 64), 68u);
  EXPECT_THROW(DTypeBytes(DType::kQ8_0, 33), Error);
  EXPECT_EQ(ParseDType("BF16"), DType::kBF16);
  EXPECT_THROW(ParseDType("int4"), Error);
}

// GGML's block formats are dtypes too (routed experts keep them): sizes from the format
// definitions (docs/formats.md), names as llama.cpp spells them, any case accepted.
TEST(DTypeTest, BlockFormatsAreDTypes) {
  EXPECT_EQ(DTypeBytes(DType::kQ4_K, 512), 288u);  // 2 blocks of 144 bytes.
  EXPECT_EQ(DTypeBytes(DType::kQ6_K, 256), 210u);
  EXPECT_EQ(DTypeBytes(DType::kMXFP4, 64), 34u);   // 2 blocks of 17 bytes.
  EXPECT_EQ(DTypeBytes(DType::kQ4_0, 32), 18u);
  EXPECT_THROW(DTypeBytes(DType::kQ4_K, 128), Error);  // Half a block.
  EXPECT_EQ(DTypeBlockElems(DType::kQ4_K), 256);
  EXPECT_EQ(DTypeBlockElems(DType::kIQ4_NL), 32);
  EXPECT_EQ(DTypeBlockElems(DType::kBF16), 1);
  EXPECT_EQ(ParseDType("Q4_K"), DType::kQ4_K);
  EXPECT_EQ(ParseDType("mxfp4"), DType::kMXFP4);
  EXPECT_EQ(std::string(DTypeName(DType::kQ5_K)), "q5_K");
  EXPECT_TRUE(IsBlockQuantized(DType::kQ8_0));
  EXPECT_TRUE(IsBlockQuantized(DType::kIQ4_XS));
  EXPECT_FALSE(IsBlockQuantized(DType::kF16));
  EXPECT_TRUE(IsLinearDType(DType::kQ8_0));
  EXPECT_FALSE(IsLinearDType(DType::kQ4_K));
  try {
    ParseDType("iq2_xxs");
    ADD_FAILURE() << "iq2_xxs parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_K"), std::string::npos) << e.what();
  }
  // q4_0 block: d = 0.5 (f16 0x3800), byte 0 = 0x2f: weight 0 = (15 - 8) * 0.5, weight 16 =
  // (2 - 8) * 0.5.
  std::vector<std::byte> block(18, std::byte{0x88});
  block[0] = std::byte{0x00};
  block[1] = std::byte{0x38};
  block[2] = std::byte{0x2f};
  EXPECT_EQ(ElementToF32(DType::kQ4_0, block.data(), 0), 3.5f);
  EXPECT_EQ(ElementToF32(DType::kQ4_0, block.data(), 16), -3.0f);
  EXPECT_EQ(ElementToF32(DType::kQ4_0, block.data(), 1), 0.0f);
}

// The one scalar widening every layer uses, on values worked out by hand.
TEST(DTypeTest, ConvertToF32OfEveryDType) {
  auto bytes = [](const void* p, size_t n) {
    std::vector<std::byte> b(n);
    std::memcpy(b.data(), p, n);
    return b;
  };
  float out[32];
  const float f32[] = {1.5f, -0.25f};
  ConvertToF32(bytes(f32, sizeof f32).data(), DType::kF32, 2, out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -0.25f);
  const uint16_t f16[] = {0x3c00, 0xc100, 0x0001};  // 1, -2.5, 2^-24.
  ConvertToF32(bytes(f16, sizeof f16).data(), DType::kF16, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.5f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  const uint16_t bf16[] = {0x3f80, 0xc040};  // 1, -3.
  ConvertToF32(bytes(bf16, sizeof bf16).data(), DType::kBF16, 2, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  // Q8_0: scale 0.5 (f16 0x3800), then 32 int8 values; element i is q[i] * 0.5.
  std::vector<std::byte> q8(kQ8BlockBytes);
  const uint16_t scale = 0x3800;
  std::memcpy(q8.data(), &scale, 2);
  for (int i = 0; i < kQ8BlockSize; ++i)
    q8[2 + i] = static_cast<std::byte>(static_cast<int8_t>(i - 16));
  ConvertToF32(q8.data(), DType::kQ8_0, kQ8BlockSize, out);
  EXPECT_EQ(out[0], -8.0f);
  EXPECT_EQ(out[16], 0.0f);
  EXPECT_EQ(out[31], 7.5f);
  EXPECT_EQ(ElementToF32(DType::kQ8_0, q8.data(), 17), 0.5f);
}

// kernels::ToF32 is the vectorised form of ConvertToF32: the same bits for every dtype, and
// TensorToF32 widens a whole tensor the same way.
TEST(DTypeTest, KernelWideningMatchesTheScalarOne) {
  std::vector<std::byte> raw(2 * kQ8BlockBytes);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::byte>((i * 37 + 11) % 251);
  for (size_t b = 0; b < 2; ++b) {  // Finite Q8_0 scales (f16 0x2c00 = 1/16).
    raw[b * kQ8BlockBytes] = std::byte{0x00};
    raw[b * kQ8BlockBytes + 1] = std::byte{0x2c};
  }
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kQ8_0}) {
    const int64_t n = dtype == DType::kQ8_0 ? 64 : 34;
    std::vector<float> scalar(n), vector(n);
    ConvertToF32(raw.data(), dtype, n, scalar.data());
    kernels::ToF32(raw.data(), dtype, n, vector.data());
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(scalar[i])) {
        EXPECT_TRUE(std::isnan(vector[i])) << DTypeName(dtype) << " " << i;
      } else {
        EXPECT_EQ(scalar[i], vector[i]) << DTypeName(dtype) << " " << i;
      }
    }
    TensorView t;
    t.dtype = dtype;
    t.shape = {2, n / 2};
    t.data = raw.data();
    t.nbytes = DTypeBytes(dtype, n);
    const std::vector<float> whole = TensorToF32(t);
    ASSERT_EQ(whole.size(), static_cast<size_t>(n));
    EXPECT_EQ(std::memcmp(whole.data(), scalar.data(), n * sizeof(float)), 0) << DTypeName(dtype);
  }
}

}  // namespace
}  // namespace moex

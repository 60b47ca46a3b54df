#include "core/dtype.h"

#include <gtest/gtest.h>

#include "core/error.h"

#include <cmath>
#include <limits>

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
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);                // Largest finite.
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);                // Rounds to infinity.
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);   // Tie with zero goes to even (0).
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeBytes(DType::kBF16, 10), 20u);
  EXPECT_EQ(DTypeBytes(DType::kQ8_0, 64), 68u);
  EXPECT_THROW(DTypeBytes(DType::kQ8_0, 33), Error);
  EXPECT_EQ(ParseDType("BF16"), DType::kBF16);
  EXPECT_THROW(ParseDType("int4"), Error);
}

}  // namespace
}  // namespace moex

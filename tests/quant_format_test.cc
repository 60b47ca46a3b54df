// GGML block formats: the decoder against an independent reference written per weight from
// the format definitions (bit positions computed from the weight's index, Q3_K's scales
// unpacked with 32-bit masks as the format's reference code describes them), on random and
// adversarial blocks; the quantiser's round trip; bad inputs.
#include "core/quant_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "support/shared_data.h"

namespace moex {
namespace {

double H(const uint8_t* p) {
  return F16ToF32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}
int Nibble(const uint8_t* qs, int i) {  // Weight i of a 32-weight nibble block.
  return i < 16 ? (qs[i] & 0xf) : (qs[i - 16] >> 4);
}
constexpr int kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr double kFp4[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

int Q3Scale(const uint8_t* packed, int i) {
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  const uint32_t m1 = 0x03030303u, m2 = 0x0f0f0f0fu;
  aux[2] = ((aux[0] >> 4) & m2) | (((tmp >> 4) & m1) << 4);
  aux[3] = ((aux[1] >> 4) & m2) | (((tmp >> 6) & m1) << 4);
  aux[0] = (aux[0] & m2) | (((tmp >> 0) & m1) << 4);
  aux[1] = (aux[1] & m2) | (((tmp >> 2) & m1) << 4);
  int8_t s[16];
  std::memcpy(s, aux, 16);
  return s[i] - 32;
}

void K4ScaleMin(const uint8_t* p, int j, int* sc, int* mn) {
  // Scale/min j as 6-bit fields: j < 4 from bytes j and j + 4; else nibbles of byte j + 4
  // and bits 6-7 of bytes j - 4 (scale) and j (min).
  if (j < 4) {
    *sc = p[j] % 64, *mn = p[j + 4] % 64;
  } else {
    *sc = p[j + 4] % 16 + 16 * (p[j - 4] / 64);
    *mn = p[j + 4] / 16 + 16 * (p[j] / 64);
  }
}

// The value of weight i of one block, in double.
double Reference(QuantFormat f, const uint8_t* b, int i) {
  switch (f) {
    case QuantFormat::kQ4_0:
      return H(b) * (Nibble(b + 2, i) - 8);
    case QuantFormat::kQ4_1:
      return H(b) * Nibble(b + 4, i) + H(b + 2);
    case QuantFormat::kQ5_0:
    case QuantFormat::kQ5_1: {
      const bool q51 = f == QuantFormat::kQ5_1;
      const uint8_t* qh = b + (q51 ? 4 : 2);
      const int high = (qh[i / 8] >> (i % 8)) & 1;
      const int q = Nibble(qh + 4, i) + 16 * high;
      return q51 ? H(b) * q + H(b + 2) : H(b) * (q - 16);
    }
    case QuantFormat::kQ8_0:
      return H(b) * static_cast<int8_t>(b[2 + i]);
    case QuantFormat::kQ2_K: {
      const int half = i / 128, plane = (i % 128) / 32, part = (i % 32) / 16, l = i % 16;
      const int sub = i / 16;
      const int q = (b[16 + 32 * half + 16 * part + l] >> (2 * plane)) & 3;
      return H(b + 80) * (b[sub] % 16) * q - H(b + 82) * (b[sub] / 16);
    }
    case QuantFormat::kQ3_K: {
      const int half = i / 128, plane = (i % 128) / 32, part = (i % 32) / 16, l = i % 16;
      const int low = (b[32 + 32 * half + 16 * part + l] >> (2 * plane)) & 3;
      const bool high = (b[16 * part + l] >> (4 * half + plane)) & 1;
      return H(b + 108) * Q3Scale(b + 96, i / 16) * (low - (high ? 0 : 4));
    }
    case QuantFormat::kQ4_K:
    case QuantFormat::kQ5_K: {
      const bool q5 = f == QuantFormat::kQ5_K;
      const int sub = i / 32, l = i % 32;
      int sc, mn;
      K4ScaleMin(b + 4, sub, &sc, &mn);
      const uint8_t* qs = b + (q5 ? 48 : 16) + 32 * (sub / 2);
      int q = sub % 2 ? qs[l] >> 4 : qs[l] & 0xf;
      if (q5) q += 16 * ((b[16 + l] >> sub) & 1);
      return H(b) * sc * q - H(b + 2) * mn;
    }
    case QuantFormat::kQ6_K: {
      const int half = i / 128, p = (i % 128) / 32, l = i % 32;
      const int low = (b[64 * half + l + 32 * (p % 2)] >> (4 * (p / 2))) & 0xf;
      const int high = (b[128 + 32 * half + l] >> (2 * p)) & 3;
      return H(b + 208) * static_cast<int8_t>(b[192 + i / 16]) * ((low | (high << 4)) - 32);
    }
    case QuantFormat::kIQ4_NL:
      return H(b) * kIq4[Nibble(b + 2, i)];
    case QuantFormat::kIQ4_XS: {
      const int ib = i / 32;
      const int scales_h = b[2] | (b[3] << 8);
      const int ls =
          ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | (((scales_h >> (2 * ib)) & 3) << 4);
      return H(b) * (ls - 32) * kIq4[Nibble(b + 8 + 16 * ib, i % 32)];
    }
    case QuantFormat::kMXFP4:
      return std::ldexp(kFp4[Nibble(b + 1, i)], b[0] - 127);
  }
  return NAN;
}

// Random bytes, with every f16 scale replaced by a random finite one (and MXFP4's exponent
// kept below 0xFF).
std::vector<uint8_t> RandomBlocks(QuantFormat f, int blocks, std::mt19937& rng) {
  const QuantFormatInfo& info = Info(f);
  std::vector<uint8_t> data(static_cast<size_t>(blocks) * info.block_bytes);
  for (uint8_t& byte : data) byte = static_cast<uint8_t>(rng());
  std::normal_distribution<float> normal(0, 0.05f);
  auto half = [&](uint8_t* p) {
    const uint16_t h = F32ToF16(normal(rng));
    p[0] = static_cast<uint8_t>(h), p[1] = static_cast<uint8_t>(h >> 8);
  };
  for (int k = 0; k < blocks; ++k) {
    uint8_t* b = data.data() + static_cast<size_t>(k) * info.block_bytes;
    switch (f) {
      case QuantFormat::kQ4_1:
      case QuantFormat::kQ5_1:
      case QuantFormat::kQ4_K:
      case QuantFormat::kQ5_K:
        half(b), half(b + 2);
        break;
      case QuantFormat::kQ2_K:
        half(b + 80), half(b + 82);
        break;
      case QuantFormat::kQ3_K:
        half(b + 108);
        break;
      case QuantFormat::kQ6_K:
        half(b + 208);
        break;
      case QuantFormat::kMXFP4:
        b[0] = static_cast<uint8_t>(100 + rng() % 50);
        break;
      default:
        half(b);
    }
  }
  return data;
}

class QuantFormatTest : public ::testing::TestWithParam<QuantFormat> {};

TEST_P(QuantFormatTest, DecoderMatchesThePerWeightReferenceOnRandomBlocks) {
  const QuantFormat f = GetParam();
  const QuantFormatInfo& info = Info(f);
  std::mt19937 rng(7 + static_cast<int>(f));
  const int blocks = 64;
  const std::vector<uint8_t> data = RandomBlocks(f, blocks, rng);
  ASSERT_FALSE(FindNonFiniteScale(f, data.data(), int64_t{blocks} * info.block_elems));
  std::vector<float> out(static_cast<size_t>(blocks) * info.block_elems);
  Dequantize(f, data.data(), static_cast<int64_t>(out.size()), out.data());
  for (int k = 0; k < blocks; ++k) {
    const uint8_t* b = data.data() + static_cast<size_t>(k) * info.block_bytes;
    for (int i = 0; i < info.block_elems; ++i) {
      const double ref = Reference(f, b, i);
      const float got = out[static_cast<size_t>(k) * info.block_elems + i];
      ASSERT_NEAR(got, ref, 1e-6 * (std::fabs(ref) + 1e-3))
          << info.name << " block " << k << " weight " << i;
    }
  }
}

TEST_P(QuantFormatTest, QuantiserRoundTripIsCloseAndDecodesAsTheReference) {
  const QuantFormat f = GetParam();
  const QuantFormatInfo& info = Info(f);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 0.02f);
  const int64_t n = 16 * 256;
  std::vector<float> w(n);
  for (float& v : w) v = normal(rng);
  std::vector<uint8_t> q(QuantBytes(f, n));
  Quantize(f, w.data(), n, q.data());
  std::vector<float> back(n);
  Dequantize(f, q.data(), n, back.data());
  double err = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    err += (back[i] - w[i]) * (back[i] - w[i]);
    norm += w[i] * w[i];
    const uint8_t* block = q.data() + (i / info.block_elems) * info.block_bytes;
    ASSERT_NEAR(back[i], Reference(f, block, static_cast<int>(i % info.block_elems)),
                1e-6 * (std::fabs(back[i]) + 1e-6));
  }
  // Relative RMS error of round-to-nearest with b bits is about 2^-b of the range; these
  // bounds are ~2x what the encoder achieves and far below a mis-packed block's ~1.
  const double bound = [&] {
    switch (f) {
      case QuantFormat::kQ8_0:
        return 0.01;
      case QuantFormat::kQ6_K:
        return 0.04;
      case QuantFormat::kQ5_0:
      case QuantFormat::kQ5_1:
      case QuantFormat::kQ5_K:
        return 0.08;
      case QuantFormat::kQ2_K:
        return 0.6;
      case QuantFormat::kQ3_K:
        return 0.35;
      default:
        return 0.2;
    }
  }();
  EXPECT_LT(std::sqrt(err / norm), bound) << info.name;
}

TEST_P(QuantFormatTest, ZeroWeightsEncodeAndDecodeToZero) {
  const QuantFormat f = GetParam();
  const int64_t n = 256;
  std::vector<float> w(n, 0.0f), back(n, 1.0f);
  std::vector<uint8_t> q(QuantBytes(f, n));
  Quantize(f, w.data(), n, q.data());
  Dequantize(f, q.data(), n, back.data());
  for (float v : back) ASSERT_EQ(v, 0.0f) << QuantFormatName(f);
}

TEST_P(QuantFormatTest, BadInputsAreRefusedByName) {
  const QuantFormat f = GetParam();
  const QuantFormatInfo& info = Info(f);
  EXPECT_THROW(QuantBytes(f, info.block_elems + 1), Error);
  std::vector<float> w(256, 0.01f);
  w[5] = NAN;
  std::vector<uint8_t> q(QuantBytes(f, 256));
  try {
    Quantize(f, w.data(), 256, q.data());
    ADD_FAILURE() << "NaN weight accepted by " << info.name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(info.name), std::string::npos) << e.what();
  }
  // A non-finite scale in the third block is found.
  std::mt19937 rng(3);
  std::vector<uint8_t> data = RandomBlocks(f, 4, rng);
  uint8_t* third = data.data() + 2 * info.block_bytes;
  const int scale_offset = f == QuantFormat::kQ2_K   ? 80
                           : f == QuantFormat::kQ3_K ? 108
                           : f == QuantFormat::kQ6_K ? 208
                                                     : 0;
  if (f == QuantFormat::kMXFP4) {
    third[0] = 0xff;
  } else {
    third[scale_offset] = 0x00, third[scale_offset + 1] = 0x7c;  // f16 +inf.
  }
  EXPECT_EQ(FindNonFiniteScale(f, data.data(), 4 * int64_t{info.block_elems}), 2);
}

std::vector<char> ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

// llama.cpp's own reference decoder (gguf-py, `gguf.quants.dequantize`) decoded these blocks
// when tools/reference/ggml_block_fixtures.py wrote them: random blocks and adversarial ones
// (zero, largest and subnormal scales, all-zero and all-one codes).
TEST_P(QuantFormatTest, DecoderMatchesLlamaCppsReferenceOnItsFixtures) {
  const QuantFormat f = GetParam();
  const QuantFormatInfo& info = Info(f);
  const auto dir = testing::SourceDir() / "tests" / "data" / "ggml_blocks";
  const std::vector<char> blocks = ReadAll(dir / (std::string(info.name) + ".blocks"));
  const std::vector<char> expected = ReadAll(dir / (std::string(info.name) + ".f32"));
  ASSERT_FALSE(blocks.empty()) << "missing fixture for " << info.name << " in " << dir;
  ASSERT_EQ(blocks.size() % info.block_bytes, 0u);
  const int64_t n = static_cast<int64_t>(blocks.size() / info.block_bytes) * info.block_elems;
  ASSERT_EQ(expected.size(), static_cast<size_t>(n) * 4);
  std::vector<float> want(n), got(n);
  std::memcpy(want.data(), expected.data(), expected.size());
  Dequantize(f, reinterpret_cast<const uint8_t*>(blocks.data()), n, got.data());
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(want[i])) {  // E.g. mxfp4's largest exponent times 6 overflows f32.
      ASSERT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])
          << info.name << " weight " << i << ": " << got[i] << " vs " << want[i];
      continue;
    }
    // gguf-py computes in float32 too, but may group products differently.
    ASSERT_NEAR(got[i], want[i], 2e-6 * std::fabs(want[i]) + 1e-30)
        << info.name << " block " << i / info.block_elems << " weight " << i % info.block_elems;
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantFormatTest, ::testing::ValuesIn(kAllQuantFormats),
                         [](const auto& info) { return std::string(QuantFormatName(info.param)); });

TEST(QuantFormat, HandDecodedBlocks) {
  // Q4_0 with d = 0.5 (f16 0x3800): byte 0 = 0x9F gives weight 0 = (15 - 8) * 0.5 and
  // weight 16 = (9 - 8) * 0.5.
  uint8_t q4[18] = {0x00, 0x38, 0x9f};
  for (int j = 1; j < 16; ++j) q4[2 + j] = 0x88;  // Zeros.
  float y[32];
  Dequantize(QuantFormat::kQ4_0, q4, 32, y);
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[16], 0.5f);
  EXPECT_EQ(y[1], 0.0f);
  // MXFP4 with exponent 127 (scale 1): code 7 is 6.0, code 9 is -0.5.
  uint8_t fp4[17] = {127, 0x97};
  Dequantize(QuantFormat::kMXFP4, fp4, 32, y);
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(y[16], -0.5f);
  // Q8_0 weights too large for an f16 scale are refused.
  std::vector<float> big(32, 1e7f);
  std::vector<uint8_t> out(34);
  EXPECT_THROW(Quantize(QuantFormat::kQ8_0, big.data(), 32, out.data()), Error);
}

TEST(QuantFormat, NamesAndIds) {
  EXPECT_EQ(ParseQuantFormat("Q4_K"), QuantFormat::kQ4_K);
  EXPECT_EQ(ParseQuantFormat("iq4_xs"), QuantFormat::kIQ4_XS);
  EXPECT_EQ(ParseQuantFormat("q4_k_m"), std::nullopt);  // A mix, not a format.
  EXPECT_EQ(QuantFormatOfGgmlType(39), QuantFormat::kMXFP4);
  EXPECT_EQ(QuantFormatOfGgmlType(16), std::nullopt);  // iq2_xxs: not supported.
  EXPECT_EQ(QuantBytes(QuantFormat::kQ4_K, 512), 288u);
  EXPECT_EQ(QuantBytes(QuantFormat::kQ6_K, 256), 210u);
}

}  // namespace
}  // namespace moex

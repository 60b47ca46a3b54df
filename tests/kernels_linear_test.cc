#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/activation_precision.h"
#include "kernels/ops.h"
#include "kernels_test_util.h"

namespace moex::kernels {
namespace {

using testing::BitEqual;
using testing::ForEachTarget;
using testing::kAllDTypes;
using testing::MakeWeights;
using testing::RandomVector;
using testing::Weights;

TEST(KernelsLinearTest, HandComputedF32WithBias) {
  const float w[] = {1, 2, 3, 4, 5, 6};
  const float x[] = {1, 1, 1, 1, 0, -1};
  const float bias[] = {0.5f, -1};
  ForEachTarget([&] {
    float y[4] = {};
    Linear(reinterpret_cast<const std::byte*>(w), DType::kF32, 2, 3, x, 2, y, bias);
    EXPECT_EQ(y[0], 6.5f);   // 1+2+3+0.5
    EXPECT_EQ(y[1], 14.0f);  // 4+5+6-1
    EXPECT_EQ(y[2], -1.5f);  // 1-3+0.5
    EXPECT_EQ(y[3], -3.0f);  // 4-6-1
  });
}

TEST(KernelsLinearTest, HandComputedHalfAndBFloat) {
  // Small integers are exact in both 16-bit formats.
  const float wf[] = {1, -2, 3, 0.5f};
  const float x[] = {2, 1, 1, 4};
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<std::byte> w(8);
    FromF32(wf, dtype, 4, w.data());
    ForEachTarget([&] {
      float y = 0;
      Linear(w.data(), dtype, 1, 4, x, 1, &y);
      EXPECT_EQ(y, 5.0f);  // 2-2+3+2
    });
  }
}

TEST(KernelsLinearTest, HandComputedQ8) {
  // One block, scale 0.5 (exact in f16), q = 1..32: dot with ones = 0.5 * 528.
  std::vector<std::byte> w(kQ8BlockBytes);
  const uint16_t d = F32ToF16(0.5f);
  std::memcpy(w.data(), &d, 2);
  for (int i = 0; i < 32; ++i) w[2 + i] = static_cast<std::byte>(i + 1);
  const std::vector<float> x(32, 1.0f);
  ForEachTarget([&] {
    float y = 0;
    Linear(w.data(), DType::kQ8_0, 1, 32, x.data(), 1, &y);
    EXPECT_EQ(y, 264.0f);
  });
}

struct Shape {
  int64_t out, in, n;
};

// Tolerance: an f32 dot of K terms accumulated in N lanes then reduced has error at most
// about (K/N + log2 N) * 2^-24 * sum|w x| (worst case); for K <= 1024 that is < 7e-5 of
// sum|w x| on AVX-512 and the scalar target's single chain. We use 1e-4 * sum|w x|: wide
// enough for every target, while an indexing or conversion bug gives O(1) relative errors.
void ExpectMatchesReference(DType dtype, const Shape& s, bool with_bias) {
  const Weights w = MakeWeights(dtype, s.out, s.in, 11 + s.in);
  const std::vector<float> x = RandomVector(s.n * s.in, 7 + s.n);
  const std::vector<float> bias = RandomVector(s.out, 3);
  std::vector<float> y(s.n * s.out, NAN);
  Linear(w.bytes.data(), dtype, s.out, s.in, x.data(), s.n, y.data(),
         with_bias ? bias.data() : nullptr);
  for (int64_t t = 0; t < s.n; ++t) {
    for (int64_t o = 0; o < s.out; ++o) {
      double ref = with_bias ? bias[o] : 0.0, mag = with_bias ? std::fabs(bias[o]) : 0.0;
      for (int64_t i = 0; i < s.in; ++i) {
        ref += w.values[o * s.in + i] * x[t * s.in + i];
        mag += std::fabs(w.values[o * s.in + i] * x[t * s.in + i]);
      }
      ASSERT_NEAR(y[t * s.out + o], ref, 1e-4 * mag + 1e-30)
          << DTypeName(dtype) << " out=" << s.out << " in=" << s.in << " n=" << s.n << " t=" << t
          << " o=" << o;
    }
  }
}

TEST(KernelsLinearTest, MatchesDoubleReferenceAllDTypesAndTargets) {
  // The reference is the exact dot of the dequantised weights: f32 activations.
  const ScopedActivationPrecision f32_activations(ActivationPrecision::kF32);
  const Shape any[] = {{1, 1, 1},    {7, 33, 3},     {5, 100, 17}, {33, 64, 64},
                       {13, 257, 5}, {70, 512, 130}, {3, 15, 2},   {9, 1000, 1}};
  const Shape q8[] = {{1, 32, 1},    {7, 32, 3},     {9, 96, 17},
                      {33, 320, 64}, {70, 512, 130}, {5, 1024, 2}};
  ForEachTarget([&] {
    for (DType dtype : kAllDTypes) {
      if (dtype == DType::kQ8_0) {
        for (const Shape& s : q8) ExpectMatchesReference(dtype, s, s.n % 2 == 1);
      } else {
        for (const Shape& s : any) ExpectMatchesReference(dtype, s, s.n % 2 == 1);
      }
    }
  });
}

// Row t of the output must not depend on the batch it was computed in.
TEST(KernelsLinearTest, BatchInvariantBitExact) {
  ForEachTarget([&] {
    for (DType dtype : kAllDTypes) {
      for (int64_t in : {int64_t{64}, int64_t{160}, int64_t{333}}) {
        if (dtype == DType::kQ8_0 && in % 32 != 0) continue;
        const int64_t out = 37, n = 150;
        const Weights w = MakeWeights(dtype, out, in, 5);
        const std::vector<float> x = RandomVector(n * in, 9);
        const std::vector<float> bias = RandomVector(out, 4);
        std::vector<float> all(n * out);
        Linear(w.bytes.data(), dtype, out, in, x.data(), n, all.data(), bias.data());
        // Every sub-batch [t, t + len) with len in a set crossing both code paths and tiles.
        for (int64_t len :
             {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{16}, int64_t{17}, int64_t{64}}) {
          for (int64_t t = 0; t + len <= n; t += len + 11) {
            std::vector<float> part(len * out);
            Linear(w.bytes.data(), dtype, out, in, &x[t * in], len, part.data(), bias.data());
            ASSERT_EQ(std::memcmp(part.data(), &all[t * out], part.size() * sizeof(float)), 0)
                << DTypeName(dtype) << " in=" << in << " t=" << t << " len=" << len;
          }
        }
      }
    }
  });
}

// Decode (n <= 2) interleaves rows shorter than half a page in blocks of up to 64 rows;
// every row must still equal its row of a large batch, across whole blocks and tails.
TEST(KernelsLinearTest, InterleavedDecodeRowsBatchInvariantBitExact) {
  ForEachTarget([&] {
    for (DType dtype : kAllDTypes) {
      for (int64_t in : {int64_t{64}, int64_t{160}, int64_t{512}, int64_t{1024}}) {
        const int64_t out = 203, n = 9;
        const Weights w = MakeWeights(dtype, out, in, 41);
        const std::vector<float> x = RandomVector(n * in, 42);
        std::vector<float> all(n * out);
        Linear(w.bytes.data(), dtype, out, in, x.data(), n, all.data());
        for (int64_t len : {int64_t{1}, int64_t{2}}) {
          std::vector<float> part(len * out);
          Linear(w.bytes.data(), dtype, out, in, &x[3 * in], len, part.data());
          ASSERT_EQ(std::memcmp(part.data(), &all[3 * out], part.size() * sizeof(float)), 0)
              << DTypeName(dtype) << " in=" << in << " len=" << len;
        }
      }
    }
  });
}

// LinearMulti gives each output the bits of its own Linear call, whatever the mix of
// dtypes, biases, batch sizes and thread counts.
TEST(KernelsLinearTest, MultiEqualsSeparateCallsBitExact) {
  ForEachTarget([&] {
    const int64_t in = 256;
    const Weights a = MakeWeights(DType::kBF16, 300, in, 51);
    const Weights b = MakeWeights(DType::kQ8_0, 70, in, 52);
    const Weights c = MakeWeights(DType::kF32, 1000, in, 53);
    const std::vector<float> bias = RandomVector(70, 54);
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{13}}) {
      const std::vector<float> x = RandomVector(n * in, 55);
      std::vector<float> ya(n * 300), yb(n * 70), yc(n * 1000);
      Linear(a.bytes.data(), DType::kBF16, 300, in, x.data(), n, ya.data());
      Linear(b.bytes.data(), DType::kQ8_0, 70, in, x.data(), n, yb.data(), bias.data());
      Linear(c.bytes.data(), DType::kF32, 1000, in, x.data(), n, yc.data());
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> ma(n * 300), mb(n * 70), mc(n * 1000);
        const LinearOutput outs[] = {{a.bytes.data(), DType::kBF16, 300, in, ma.data(), nullptr},
                                     {b.bytes.data(), DType::kQ8_0, 70, in, mb.data(), bias.data()},
                                     {c.bytes.data(), DType::kF32, 1000, in, mc.data(), nullptr}};
        LinearMulti(outs, x.data(), n, pool);
        ASSERT_TRUE(BitEqual(ya, ma)) << "n=" << n << " threads=" << threads;
        ASSERT_TRUE(BitEqual(yb, mb)) << "n=" << n << " threads=" << threads;
        ASSERT_TRUE(BitEqual(yc, mc)) << "n=" << n << " threads=" << threads;
      }
    }
  });
}

TEST(KernelsLinearTest, ThreadCountInvariantBitExact) {
  ForEachTarget([&] {
    for (DType dtype : kAllDTypes) {
      const int64_t out = 301, in = 256;
      const Weights w = MakeWeights(dtype, out, in, 21);
      for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{40}}) {
        const std::vector<float> x = RandomVector(n * in, 22);
        std::vector<float> ref;
        for (int threads : {1, 2, 3, 5}) {
          ThreadPool pool(threads);
          std::vector<float> y(n * out);
          Linear(w.bytes.data(), dtype, out, in, x.data(), n, y.data(), nullptr, pool);
          if (ref.empty()) {
            ref = y;
          } else {
            ASSERT_TRUE(BitEqual(ref, y))
                << DTypeName(dtype) << " n=" << n << " threads=" << threads;
          }
        }
      }
    }
  });
}

// Q8_0 weights are dequantised exactly before the multiply, so they give the same bits as
// the f32 matrix of their values (and the same holds for f16 and bf16).
TEST(KernelsLinearTest, NarrowDTypesEqualTheirF32Values) {
  // The reference is the exact dot of the dequantised weights: f32 activations.
  const ScopedActivationPrecision f32_activations(ActivationPrecision::kF32);
  ForEachTarget([&] {
    for (DType dtype : {DType::kF16, DType::kBF16, DType::kQ8_0}) {
      const int64_t out = 19, in = 224;
      for (int64_t n : {int64_t{1}, int64_t{9}}) {
        const Weights w = MakeWeights(dtype, out, in, 31);
        std::vector<float> wf(w.values.begin(), w.values.end());
        const std::vector<float> x = RandomVector(n * in, 32);
        std::vector<float> a(n * out), b(n * out);
        Linear(w.bytes.data(), dtype, out, in, x.data(), n, a.data());
        Linear(reinterpret_cast<const std::byte*>(wf.data()), DType::kF32, out, in, x.data(), n,
               b.data());
        ASSERT_TRUE(BitEqual(a, b)) << DTypeName(dtype) << " n=" << n;
      }
    }
  });
}

TEST(KernelsLinearTest, TensorViewOverload) {
  const Weights w = MakeWeights(DType::kBF16, 4, 8, 1);
  TensorView view;
  view.dtype = DType::kBF16;
  view.shape = {4, 8};
  view.data = w.bytes.data();
  view.nbytes = w.bytes.size();
  const std::vector<float> x = RandomVector(8, 2);
  std::vector<float> a(4), b(4);
  Linear(view, x.data(), 1, a.data());
  Linear(w.bytes.data(), DType::kBF16, 4, 8, x.data(), 1, b.data());
  EXPECT_TRUE(BitEqual(a, b));
}

TEST(KernelsLinearTest, RejectsQ8WidthNotMultipleOf32) {
  std::vector<std::byte> w(64);
  float x[40] = {}, y[1];
  EXPECT_THROW(Linear(w.data(), DType::kQ8_0, 1, 40, x, 1, y), Error);
}

}  // namespace
}  // namespace moex::kernels

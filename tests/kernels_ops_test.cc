#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "kernels_test_util.h"

namespace moex::kernels {
namespace {

using testing::BitEqual;
using testing::ForEachTarget;
using testing::kAllDTypes;
using testing::MakeWeights;
using testing::RandomVector;

// Element-wise results are compared with a relative tolerance of 1e-5: each output is a
// handful of f32 operations (a few ulp, 2^-24 ~ 6e-8 each) plus Highway's Exp (~1-2 ulp),
// or a sum over at most a few thousand terms, so 1e-5 is loose for correct code and tight
// for any real bug.
constexpr double kRel = 1e-5;

TEST(KernelsOpsTest, SimdTargetIsReported) {
  EXPECT_FALSE(SimdTargetName().empty());
  EXPECT_FALSE(AvailableSimdTargets().empty());
}

TEST(KernelsOpsTest, RmsNormHandComputed) {
  ForEachTarget([] {
    const float x[] = {3, 4};
    const float w[] = {1, 2};
    float out[2];
    RmsNorm(x, w, 1, 2, 0.0f, out);  // rms = sqrt(12.5)
    EXPECT_NEAR(out[0], 3 / std::sqrt(12.5), 1e-6);
    EXPECT_NEAR(out[1], 8 / std::sqrt(12.5), 1e-6);
  });
}

TEST(KernelsOpsTest, RmsNormMatchesReferenceAndAliases) {
  ForEachTarget([] {
    for (int64_t dim : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{128}, int64_t{2049}}) {
      const int64_t n = 5;
      const std::vector<float> x = RandomVector(n * dim, 1, 3.0f);
      const std::vector<float> w = RandomVector(dim, 2);
      std::vector<float> out(n * dim);
      RmsNorm(x.data(), w.data(), n, dim, 1e-5f, out.data());
      for (int64_t t = 0; t < n; ++t) {
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += double(x[t * dim + i]) * x[t * dim + i];
        const double r = 1 / std::sqrt(ss / dim + 1e-5);
        for (int64_t i = 0; i < dim; ++i) {
          const double ref = x[t * dim + i] * r * w[i];
          ASSERT_NEAR(out[t * dim + i], ref, kRel * std::fabs(ref) + 1e-7) << dim;
        }
      }
      std::vector<float> inplace = x;
      RmsNorm(inplace.data(), w.data(), n, dim, 1e-5f, inplace.data());
      EXPECT_TRUE(BitEqual(inplace, out));
    }
  });
}

TEST(KernelsOpsTest, LayerNormHandComputed) {
  ForEachTarget([] {
    // mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25, so x_hat =
    // [-1.5, -0.5, 0.5, 1.5] / sqrt(1.25) = [-1.3416408, -0.4472136, 0.4472136, 1.3416408];
    // times [1, 1, 2, 0.5] plus [0, 1, 0, -1]:
    const float x[] = {1, 2, 3, 4};
    const float w[] = {1, 1, 2, 0.5f};
    const float b[] = {0, 1, 0, -1};
    float out[4];
    LayerNorm(x, w, b, 1, 4, 0.0f, out);
    EXPECT_NEAR(out[0], -1.3416407864998738, 1e-6);
    EXPECT_NEAR(out[1], 0.5527864045000421, 1e-6);
    EXPECT_NEAR(out[2], 0.8944271909999159, 1e-6);
    EXPECT_NEAR(out[3], -0.3291796067500631, 1e-6);
    // A constant row has variance 0: eps keeps it finite and the output is the bias.
    const float flat[] = {5, 5, 5, 5};
    LayerNorm(flat, w, b, 1, 4, 1e-5f, out);
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out[i], b[i]);
  });
}

TEST(KernelsOpsTest, LayerNormMatchesReferenceAliasesAndIsBatchInvariant) {
  ForEachTarget([] {
    for (int64_t dim : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{128}, int64_t{2049}}) {
      for (int64_t n : {int64_t{5}, int64_t{40}}) {  // 40 x 2049 takes the threaded path.
        // An offset of 4 makes the mean matter (a one-pass variance would lose digits).
        std::vector<float> x = RandomVector(n * dim, 1, 3.0f);
        for (float& v : x) v += 4.0f;
        const std::vector<float> w = RandomVector(dim, 2);
        const std::vector<float> b = RandomVector(dim, 3);
        std::vector<float> out(n * dim);
        LayerNorm(x.data(), w.data(), b.data(), n, dim, 1e-5f, out.data());
        for (int64_t t = 0; t < n; ++t) {
          double mean = 0, var = 0;
          for (int64_t i = 0; i < dim; ++i) mean += x[t * dim + i];
          mean /= dim;
          for (int64_t i = 0; i < dim; ++i) var += (x[t * dim + i] - mean) * (x[t * dim + i] - mean);
          const double r = 1 / std::sqrt(var / dim + 1e-5);
          for (int64_t i = 0; i < dim; ++i) {
            const double ref = (x[t * dim + i] - mean) * r * w[i] + b[i];
            ASSERT_NEAR(out[t * dim + i], ref, 1e-4 * std::fabs(ref) + 2e-5) << dim;
          }
          std::vector<float> row(dim);
          LayerNorm(&x[t * dim], w.data(), b.data(), 1, dim, 1e-5f, row.data());
          ASSERT_EQ(0, std::memcmp(row.data(), &out[t * dim], sizeof(float) * dim)) << t;
        }
        std::vector<float> inplace = x;
        LayerNorm(inplace.data(), w.data(), b.data(), n, dim, 1e-5f, inplace.data());
        EXPECT_TRUE(BitEqual(inplace, out));
      }
    }
  });
}

TEST(KernelsOpsTest, RopeNeoxRotatesHalves) {
  ForEachTarget([] {
    for (int64_t hd : {int64_t{4}, int64_t{10}, int64_t{64}, int64_t{128}}) {
      const int64_t heads = 3, half = hd / 2;
      const std::vector<float> x = RandomVector(heads * hd, 3);
      std::vector<float> cs(half), sn(half);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = 7.0 * std::pow(10000.0, -2.0 * i / hd);
        cs[i] = static_cast<float>(std::cos(angle));
        sn[i] = static_cast<float>(std::sin(angle));
      }
      std::vector<float> y = x;
      RopeNeox(y.data(), heads, hd, cs.data(), sn.data());
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
          const double a = x[h * hd + i], b = x[h * hd + half + i];
          EXPECT_NEAR(y[h * hd + i], a * cs[i] - b * sn[i], 1e-6);
          EXPECT_NEAR(y[h * hd + half + i], b * cs[i] + a * sn[i], 1e-6);
        }
      }
    }
  });
}

TEST(KernelsOpsTest, SoftmaxHandComputedAndStable) {
  ForEachTarget([] {
    float x[] = {1, 2, 3};
    Softmax(x, 3);
    const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    EXPECT_NEAR(x[0], std::exp(1.0) / z, 1e-6);
    EXPECT_NEAR(x[2], std::exp(3.0) / z, 1e-6);
    float big[] = {1000, 1001, -INFINITY};  // Would overflow without the max subtraction.
    Softmax(big, 3);
    EXPECT_NEAR(big[0], 1 / (1 + std::exp(1.0)), 1e-6);
    EXPECT_NEAR(big[1], 1 / (1 + std::exp(-1.0)), 1e-6);
    EXPECT_EQ(big[2], 0.0f);
    float one[] = {-5};
    Softmax(one, 1);
    EXPECT_EQ(one[0], 1.0f);
  });
}

TEST(KernelsOpsTest, SoftmaxMatchesReference) {
  ForEachTarget([] {
    for (int64_t n : {int64_t{2}, int64_t{17}, int64_t{64}, int64_t{1000}}) {
      const std::vector<float> x = RandomVector(n, 4, 20.0f);
      std::vector<float> y = x;
      Softmax(y.data(), n);
      double m = x[0], z = 0;
      for (float v : x) m = std::max<double>(m, v);
      for (float v : x) z += std::exp(v - m);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = std::exp(x[i] - m) / z;
        ASSERT_NEAR(y[i], ref, kRel * ref + 1e-12) << n;
      }
    }
  });
}

TEST(KernelsOpsTest, SiluMulMatchesReferenceIncludingExtremes) {
  ForEachTarget([] {
    std::vector<float> g = RandomVector(37, 5, 8.0f);
    g[0] = 0;
    g[1] = -100;
    g[2] = 100;
    g[3] = -1e30f;
    g[4] = 88.5f;
    const std::vector<float> u = RandomVector(37, 6, 2.0f);
    std::vector<float> y = g;
    SiluMul(y.data(), u.data(), 37);
    for (size_t i = 0; i < g.size(); ++i) {
      const double ref = g[i] / (1 + std::exp(-double(g[i]))) * u[i];
      ASSERT_NEAR(y[i], ref, kRel * std::fabs(ref) + 1e-30) << "g=" << g[i];
    }
    // An element's value does not depend on where the array starts or ends.
    std::vector<float> z(g.begin() + 3, g.begin() + 20);
    SiluMul(z.data(), u.data() + 3, 17);
    EXPECT_EQ(std::memcmp(z.data(), y.data() + 3, 17 * sizeof(float)), 0);
  });
}

TEST(KernelsOpsTest, ToF32IsExactForEveryDType) {
  ForEachTarget([] {
    for (DType dtype : kAllDTypes) {
      for (int64_t n : {int64_t{32}, int64_t{96}, int64_t{160}}) {
        const testing::Weights w = MakeWeights(dtype, 1, n, 7);
        std::vector<float> y(n);
        ToF32(w.bytes.data(), dtype, n, y.data());
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], w.values[i]) << DTypeName(dtype);
      }
    }
    const uint16_t bf[] = {0x3f80, 0xc000, 0x4049};  // 1, -2, 3.140625
    float y[3];
    ToF32(reinterpret_cast<const std::byte*>(bf), DType::kBF16, 3, y);
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], -2.0f);
    EXPECT_EQ(y[2], 3.140625f);
  });
}

struct AttnCase {
  int64_t n_q, pos0, heads, kv_heads, hd;
};

std::vector<float> NaiveAttention(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, const AttnCase& c, float scale) {
  std::vector<float> out(c.n_q * c.heads * c.hd);
  for (int64_t i = 0; i < c.n_q; ++i) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t kvh = h / (c.heads / c.kv_heads), len = c.pos0 + i + 1;
      std::vector<double> s(len);
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j < len; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < c.hd; ++e) {
          dot += double(q[(i * c.heads + h) * c.hd + e]) * k[(j * c.kv_heads + kvh) * c.hd + e];
        }
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      for (double& x : s) z += (x = std::exp(x - m));
      for (int64_t e = 0; e < c.hd; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < len; ++j) acc += s[j] * v[(j * c.kv_heads + kvh) * c.hd + e];
        out[(i * c.heads + h) * c.hd + e] = static_cast<float>(acc / z);
      }
    }
  }
  return out;
}

TEST(KernelsOpsTest, AttentionMatchesReferenceAndIsBatchInvariant) {
  // The last two are decode-like and large enough to run in parallel, where heads are
  // attended in groups whose size depends on the query and thread counts.
  const AttnCase cases[] = {{1, 0, 1, 1, 4},      {1, 5, 4, 2, 16},    {7, 0, 8, 2, 64},
                            {5, 9, 6, 3, 20},     {17, 30, 4, 1, 128}, {3, 2, 2, 2, 1},
                            {1, 200, 16, 16, 64}, {2, 100, 16, 4, 64}};
  ForEachTarget([&] {
    for (const AttnCase& c : cases) {
      const int64_t ctx = c.pos0 + c.n_q;
      const std::vector<float> q = RandomVector(c.n_q * c.heads * c.hd, 1);
      const std::vector<float> k = RandomVector(ctx * c.kv_heads * c.hd, 2);
      const std::vector<float> v = RandomVector(ctx * c.kv_heads * c.hd, 3);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
      std::vector<float> out(q.size());
      Attention(q.data(), c.n_q, c.pos0, k.data(), v.data(), c.heads, c.kv_heads, c.hd, scale,
                out.data());
      // Outputs are convex combinations of values in [-1, 1]: absolute tolerance.
      const std::vector<float> ref = NaiveAttention(q, k, v, c, scale);
      for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-5) << i;
      // Query i alone (at position pos0 + i) gives the same bits as inside the batch.
      const int64_t stride = c.heads * c.hd;
      for (int64_t i = 0; i < c.n_q; ++i) {
        std::vector<float> one(stride);
        Attention(&q[i * stride], 1, c.pos0 + i, k.data(), v.data(), c.heads, c.kv_heads, c.hd,
                  scale, one.data());
        ASSERT_EQ(std::memcmp(one.data(), &out[i * stride], stride * sizeof(float)), 0) << i;
      }
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        std::vector<float> again(q.size());
        Attention(q.data(), c.n_q, c.pos0, k.data(), v.data(), c.heads, c.kv_heads, c.hd, scale,
                  again.data(), pool);
        ASSERT_TRUE(BitEqual(again, out)) << threads;
      }
    }
  });
}

TEST(KernelsOpsTest, AttentionLongContextIsStable) {
  // Large scores (scale 10) would overflow exp without the max subtraction.
  const AttnCase c{2, 3000, 2, 1, 64};
  const int64_t ctx = c.pos0 + c.n_q;
  const std::vector<float> q = RandomVector(c.n_q * c.heads * c.hd, 4);
  const std::vector<float> k = RandomVector(ctx * c.kv_heads * c.hd, 5);
  const std::vector<float> v = RandomVector(ctx * c.kv_heads * c.hd, 6);
  std::vector<float> out(q.size());
  Attention(q.data(), c.n_q, c.pos0, k.data(), v.data(), c.heads, c.kv_heads, c.hd, 10.0f,
            out.data());
  const std::vector<float> ref = NaiveAttention(q, k, v, c, 10.0f);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-4) << i;
}

}  // namespace
}  // namespace moex::kernels

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "kernels/partition.h"
#include "kernels_test_util.h"

namespace moex::kernels {
namespace {

using testing::BitEqual;
using testing::DecodeElement;
using testing::ForEachTarget;
// The float dtypes: block formats (q8_0 included) use record groups and have their own
// tests (kernels_quant_expert_test.cc).
constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
using testing::RandomVector;

// One expert packed neuron-major, and the exact values of its three parts.
struct Expert {
  DType dtype;
  int64_t d, f;
  std::vector<std::byte> records;
  std::vector<double> gate, up, down;  // [f][d] each (down[i][o] = column i).

  const std::byte* record(int64_t i) const {
    return records.data() + i * ExpertRecordBytes(dtype, d);
  }
};

Expert MakeExpert(DType dtype, int64_t d, int64_t f, uint32_t seed) {
  Expert e{dtype, d, f, {}, {}, {}, {}};
  const size_t part = DTypeBytes(dtype, d);
  e.records.resize(f * 3 * part);
  e.gate.resize(f * d);
  e.up.resize(f * d);
  e.down.resize(f * d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t i = 0; i < f; ++i) {
    std::vector<double>* dst[3] = {&e.gate, &e.up, &e.down};
    for (int p = 0; p < 3; ++p) {
      const std::vector<float> v = RandomVector(d, seed * 7919 + i * 3 + p, 2 * scale);
      std::byte* out = e.records.data() + (i * 3 + p) * part;
      FromF32(v.data(), dtype, d, out);
      for (int64_t o = 0; o < d; ++o) (*dst[p])[i * d + o] = DecodeElement(out, dtype, o);
    }
  }
  return e;
}

// Tolerance: g and u are f32 dots with error <= 1e-4 * sum|w x| (see the Linear test);
// h = silu(g) u then carries |silu'(g)| |u| dg + |silu(g)| du (|silu'| < 1.1) plus a few ulp
// from exp and the division, and the down chain adds at most F * 2^-24 * sum|h down|. We
// bound every term generously at 1e-4 relative, so only real bugs (O(1) errors) fail.
void ExpectMatchesReference(const Expert& e, const std::vector<float>& x, int64_t n,
                            const std::vector<float>& y0, const std::vector<float>& y) {
  const int64_t d = e.d;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> ref(y0.begin() + t * d, y0.begin() + (t + 1) * d), tol(d, 1e-30);
    for (int64_t i = 0; i < e.f; ++i) {
      double g = 0, u = 0, gm = 0, um = 0;
      for (int64_t k = 0; k < d; ++k) {
        g += e.gate[i * d + k] * x[t * d + k];
        u += e.up[i * d + k] * x[t * d + k];
        gm += std::fabs(e.gate[i * d + k] * x[t * d + k]);
        um += std::fabs(e.up[i * d + k] * x[t * d + k]);
      }
      const double silu = g / (1 + std::exp(-g));
      const double h = silu * u;
      const double dh = 1e-4 * (1.1 * std::fabs(u) * gm + std::fabs(silu) * um + std::fabs(h));
      for (int64_t o = 0; o < d; ++o) {
        ref[o] += h * e.down[i * d + o];
        tol[o] += (dh + 1e-4 * std::fabs(h)) * std::fabs(e.down[i * d + o]);
      }
    }
    for (int64_t o = 0; o < d; ++o) {
      ASSERT_NEAR(y[t * d + o], ref[o], tol[o] + 1e-4 * std::fabs(y0[t * d + o]))
          << DTypeName(e.dtype) << " d=" << d << " f=" << e.f << " t=" << t << " o=" << o;
    }
  }
}

std::vector<float> RunOne(const Expert& e, int64_t a, int64_t b, const std::vector<float>& x,
                          int64_t n, std::vector<float> y) {
  const ExpertJob job{e.record(a), b - a, x.data(), n, y.data()};
  ExpertFfn(std::span<const ExpertJob>(&job, 1), e.dtype, e.d);
  return y;
}

TEST(KernelsExpertTest, HandComputedSingleNeuron) {
  // gate = [1, 0], up = [2, 1], down = [1, -1]; x = [1, 3]: g = 1, u = 5,
  // h = silu(1) * 5 = 5 / (1 + e^-1); y = y0 + h * down.
  const float rec[] = {1, 0, 2, 1, 1, -1};
  const float x[] = {1, 3};
  ForEachTarget([&] {
    float y[2] = {10, 20};
    const ExpertJob job{reinterpret_cast<const std::byte*>(rec), 1, x, 1, y};
    ExpertFfn(std::span<const ExpertJob>(&job, 1), DType::kF32, 2);
    const double h = 5.0 / (1.0 + std::exp(-1.0));
    EXPECT_NEAR(y[0], 10 + h, 1e-5);
    EXPECT_NEAR(y[1], 20 - h, 1e-5);
  });
}

TEST(KernelsExpertTest, MatchesDoubleReferenceAllDTypesAndTargets) {
  struct Case {
    int64_t d, f, n;
  };
  const Case cases[] = {{64, 1, 1}, {96, 37, 3}, {192, 64, 1}, {128, 50, 17}, {256, 130, 64}};
  const Case odd[] = {{100, 13, 5}, {7, 9, 2}, {33, 20, 1}};  // d not a multiple of any vector.
  ForEachTarget([&] {
    for (DType dtype : kAllDTypes) {
      for (const Case& c : cases) {
        const Expert e = MakeExpert(dtype, c.d, c.f, static_cast<uint32_t>(c.d + c.f));
        const std::vector<float> x = RandomVector(c.n * c.d, 5);
        const std::vector<float> y0 = RandomVector(c.n * c.d, 6);
        ExpectMatchesReference(e, x, c.n, y0, RunOne(e, 0, c.f, x, c.n, y0));
      }
      for (const Case& c : odd) {
        const Expert e = MakeExpert(dtype, c.d, c.f, 3);
        const std::vector<float> x = RandomVector(c.n * c.d, 8);
        const std::vector<float> y0 = RandomVector(c.n * c.d, 9);
        ExpectMatchesReference(e, x, c.n, y0, RunOne(e, 0, c.f, x, c.n, y0));
      }
    }
  });
}

// [a, c) in one call == [a, b) then [b, c) into the same accumulator, bit for bit.
TEST(KernelsExpertTest, ChunkInvariantBitExact) {
  ForEachTarget([&] {
    for (DType dtype : kAllDTypes) {
      for (int64_t d : {int64_t{96}, int64_t{100}}) {
        const int64_t f = 75;
        const Expert e = MakeExpert(dtype, d, f, 17);
        for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{33}}) {
          const std::vector<float> x = RandomVector(n * d, 18);
          const std::vector<float> y0 = RandomVector(n * d, 19);
          const std::vector<float> whole = RunOne(e, 0, f, x, n, y0);
          for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, 1, f},
                                                   {0, 16, 48, f},
                                                   {0, 7, 8, 9, 40, f},
                                                   {0, 37, 38, 74, f}}) {
            std::vector<float> y = y0;
            for (size_t c = 0; c + 1 < cuts.size(); ++c)
              y = RunOne(e, cuts[c], cuts[c + 1], x, n, y);
            ASSERT_TRUE(BitEqual(whole, y))
                << DTypeName(dtype) << " d=" << d << " n=" << n << " chunks=" << cuts.size() - 1;
          }
        }
      }
    }
  });
}

TEST(KernelsExpertTest, BatchInvariantBitExact) {
  ForEachTarget([&] {
    // d = 100 leaves a column tail (not a whole vector) in the down projection.
    for (DType dtype : kAllDTypes) for (const int64_t d : {int64_t{160}, int64_t{100}}) {
      const int64_t f = 40, n = 200;  // Crosses the 96-token cache blocks.
      const Expert e = MakeExpert(dtype, d, f, 23);
      const std::vector<float> x = RandomVector(n * d, 24);
      const std::vector<float> y0 = RandomVector(n * d, 25);
      const std::vector<float> all = RunOne(e, 0, f, x, n, y0);
      for (int64_t len :
           {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{9}, int64_t{100}}) {
        for (int64_t t = 0; t + len <= n; t += len + 23) {
          const std::vector<float> xs(x.begin() + t * d, x.begin() + (t + len) * d);
          const std::vector<float> ys(y0.begin() + t * d, y0.begin() + (t + len) * d);
          const std::vector<float> part = RunOne(e, 0, f, xs, len, ys);
          ASSERT_EQ(std::memcmp(part.data(), &all[t * d], part.size() * sizeof(float)), 0)
              << DTypeName(dtype) << " d=" << d << " t=" << t << " len=" << len;
        }
      }
    }
  });
}

// Several jobs in one call, across pools of different sizes (which switches between the
// whole-job schedule and the neuron/column split): every result equals the job run alone.
TEST(KernelsExpertTest, ScheduleAndThreadCountInvariantBitExact) {
  struct Spec {
    int64_t d, f;
    std::vector<int64_t> tokens;  // Per job.
  };
  const Spec specs[] = {
      {192, 64, {1, 1, 1, 1, 1, 1, 1, 1}},  // Small experts, decode.
      {192, 64, {3, 0, 20, 1, 7}},          // Small experts, uneven prefill, an empty job.
      {512, 360, {1, 1, 1}},                // Big experts (> 1 MiB in f32/f16): split path.
      {512, 360, {40, 2}},
  };
  ForEachTarget([&] {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (const Spec& s : specs) {
        const size_t jobs_n = s.tokens.size();
        std::vector<Expert> experts;
        std::vector<std::vector<float>> xs, y0s, alone;
        for (size_t j = 0; j < jobs_n; ++j) {
          experts.push_back(MakeExpert(dtype, s.d, s.f, 100 + j));
          xs.push_back(RandomVector(s.tokens[j] * s.d, 200 + j));
          y0s.push_back(RandomVector(s.tokens[j] * s.d, 300 + j));
          ThreadPool one(1);
          std::vector<float> y = y0s[j];
          const ExpertJob job{experts[j].record(0), s.f, xs[j].data(), s.tokens[j], y.data()};
          ExpertFfn(std::span<const ExpertJob>(&job, 1), dtype, s.d, one);
          alone.push_back(y);
        }
        for (int threads : {1, 2, 3, 7}) {
          ThreadPool pool(threads);
          std::vector<std::vector<float>> ys = y0s;
          std::vector<ExpertJob> jobs;
          for (size_t j = 0; j < jobs_n; ++j) {
            jobs.push_back({experts[j].record(0), s.f, xs[j].data(), s.tokens[j], ys[j].data()});
          }
          ExpertFfn(jobs, dtype, s.d, pool);
          for (size_t j = 0; j < jobs_n; ++j) {
            ASSERT_TRUE(BitEqual(ys[j], alone[j]))
                << DTypeName(dtype) << " d=" << s.d << " job=" << j << " threads=" << threads;
          }
        }
      }
    }
  });
}

TEST(KernelsExpertTest, RejectsQ8ModelWidthNotMultipleOf32) {
  std::vector<std::byte> rec(1024);
  std::vector<float> x(48), y(48);
  const ExpertJob job{rec.data(), 1, x.data(), 1, y.data()};
  EXPECT_THROW(ExpertFfn(std::span<const ExpertJob>(&job, 1), DType::kQ8_0, 48), Error);
}

TEST(KernelsPartitionTest, RangesAreDisjointAndCoverEverything) {
  const std::vector<size_t> counts = {10, 0, 1, 333, 64};
  const std::vector<uint64_t> costs = {3, 5, 100, 1, 7};
  for (size_t align : {size_t{1}, size_t{4}, size_t{16}}) {
    for (size_t workers : {size_t{1}, size_t{2}, size_t{3}, size_t{16}, size_t{500}}) {
      std::vector<int> seen[5];
      for (size_t j = 0; j < counts.size(); ++j) seen[j].assign(counts[j], 0);
      for (size_t w = 0; w < workers; ++w) {
        for (const WorkRange& r : PartitionWork(counts, costs, align, w, workers)) {
          for (size_t i = r.begin; i < r.end; ++i) ++seen[r.item][i];
          EXPECT_TRUE(r.begin % align == 0);
        }
      }
      for (size_t j = 0; j < counts.size(); ++j) {
        for (size_t i = 0; i < counts[j]; ++i) ASSERT_EQ(seen[j][i], 1) << j << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace moex::kernels

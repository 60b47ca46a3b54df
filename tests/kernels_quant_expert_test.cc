// Routed experts in GGML block formats: packing keeps every block (record groups), the SIMD
// decoders give core's floats, QuantExpertFfn against a double-precision reference on the
// dequantised weights, and bit-exact invariance to batch size, thread count and chunking,
// with f32 and with int8 activations (the reference then rounds the activations as the
// kernels do, so only the float scaling differs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quant_format.h"
#include "core/thread_pool.h"
#include "kernels/activation_precision.h"
#include "kernels/interleave.h"
#include "kernels/ops.h"
#include "kernels/quant_expert_ffn.h"
#include "kernels_test_util.h"
#include "model/expert_layout.h"

namespace moex::kernels {
namespace {

using testing::BitEqual;
using testing::ForEachTarget;
using testing::RandomVector;

constexpr ActivationPrecision kBothPrecisions[] = {ActivationPrecision::kF32,
                                                   ActivationPrecision::kInt8};

// Values rounded as the int8 kernels round activations (QuantizeActivationsInt8's rule,
// written out again): the dequantised values d * q, each value's step d, and whether it lies
// within 1e-3 steps of a rounding boundary (where a last-bit difference in a computed input
// may round it the other way). block 0: unchanged.
struct RoundedActivations {
  std::vector<double> values, step;
  std::vector<bool> near_half;
};
RoundedActivations RoundLikeInt8(const float* x, size_t k, size_t block) {
  RoundedActivations r;
  r.values.assign(x, x + k);
  r.step.assign(k, 0.0);
  r.near_half.assign(k, false);
  if (block == 0) return r;
  for (size_t b = 0; b < k; b += block) {
    float amax = 0;
    for (size_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    for (size_t i = b; i < b + block; ++i) {
      const float p = x[i] * id;
      r.values[i] = static_cast<double>(d) * std::nearbyint(p);
      r.step[i] = d;
      r.near_half[i] = std::fabs(std::fabs(p - std::trunc(p)) - 0.5f) < 1e-3f;
    }
  }
  return r;
}

std::vector<DType> BlockDTypes() {
  std::vector<DType> out;
  for (QuantFormat f : kAllQuantFormats) out.push_back(DTypeOf(f));
  return out;
}

// fn(dtype) for every block format on every SIMD target, with f32 and with int8
// activations.
template <class Fn>
void ForEachFormatTargetAndPrecision(const Fn& fn) {
  for (ActivationPrecision precision : kBothPrecisions) {
    const ScopedActivationPrecision scoped(precision);
    SCOPED_TRACE(ActivationPrecisionName(precision));
    ForEachTarget([&] {
      for (DType dtype : BlockDTypes()) {
        SCOPED_TRACE(DTypeName(dtype));
        fn(dtype);
      }
    });
  }
}

// A [rows, cols] matrix of `dtype` whose magnitudes vary by row and by block, so
// neighbouring blocks and sub-blocks have different scales; its exact f32 values too.
struct Matrix {
  std::vector<std::byte> bytes;
  std::vector<float> values;
};
// `dtype`'s encoding of the row-major values v.
Matrix MatrixOf(DType dtype, int64_t rows, int64_t cols, const std::vector<float>& v) {
  Matrix m;
  const size_t row = DTypeBytes(dtype, cols);
  m.bytes.resize(row * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    FromF32(&v[static_cast<size_t>(r * cols)], dtype, cols, &m.bytes[static_cast<size_t>(r) * row]);
  m.values.resize(v.size());
  ConvertToF32(m.bytes.data(), dtype, rows * cols, m.values.data());
  return m;
}
Matrix MakeMatrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> v = RandomVector(static_cast<size_t>(rows * cols), seed, 1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v[static_cast<size_t>(r * cols + c)] *=
          0.05f * (1.0f + static_cast<float>(r % 5)) * (1.0f + static_cast<float>((c / 16) % 3));
  return MatrixOf(dtype, rows, cols, v);
}

TensorView View(const char* name, DType dtype, std::vector<int64_t> shape, const Matrix& m) {
  TensorView t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = m.bytes.data();
  t.nbytes = m.bytes.size();
  return t;
}

struct Expert {
  ExpertShape shape;
  Matrix gate, up, down;  // [f, d], [f, d], [d, f] as in the checkpoint.
  std::vector<std::byte> packed;
  const std::byte* group_start(int64_t neuron) const {
    return packed.data() + static_cast<size_t>(neuron) * shape.RecordBytes();
  }
};

// An expert with gate/up in `shape.gate_up` and down in `shape.down`, packed with the shape's
// group and record size (padding included).
Expert MakeExpert(const ExpertShape& shape, uint32_t seed) {
  const int64_t d = shape.hidden_size, f = shape.neurons;
  Expert e{shape,
           MakeMatrix(shape.gate_up, f, d, seed),
           MakeMatrix(shape.gate_up, f, d, seed + 1),
           MakeMatrix(shape.down, d, f, seed + 2),
           {}};
  e.packed.resize(e.shape.ExpertBytes());
  PackExpertNeuronMajor(View("gate", shape.gate_up, {f, d}, e.gate),
                        View("up", shape.gate_up, {f, d}, e.up),
                        View("down", shape.down, {d, f}, e.down), e.shape, e.packed.data());
  return e;
}
Expert MakeExpert(DType dtype, int64_t d, int64_t f, uint32_t seed) {
  return MakeExpert(ExpertShape::Uniform(dtype, d, f), seed);
}

std::vector<float> RunExpert(const Expert& e, int64_t a, int64_t b, const std::vector<float>& x,
                             int64_t n, std::vector<float> y, ThreadPool& pool) {
  const ExpertJob job{e.group_start(a), b - a, x.data(), n, y.data()};
  ExpertFfn(std::span<const ExpertJob>(&job, 1), e.shape.Encoding(), e.shape.hidden_size, pool);
  return y;
}
std::vector<float> RunExpert(const Expert& e, int64_t a, int64_t b, const std::vector<float>& x,
                             int64_t n, std::vector<float> y) {
  return RunExpert(e, a, b, x, n, std::move(y), ThreadPool::Global());
}

// Gate/up and down in different block formats (llama.cpp's Q4_K_M and similar mixes), each
// record padded by 20 bytes as in a model whose other layers are wider.
std::vector<ExpertShape> MixedShapes(int64_t d, int64_t f) {
  std::vector<ExpertShape> out;
  for (const auto& [gate_up, down] : {std::pair{DType::kQ4_K, DType::kQ6_K},
                                      {DType::kQ8_0, DType::kQ4_K},
                                      {DType::kQ4_K, DType::kQ8_0},
                                      {DType::kMXFP4, DType::kQ5_K},
                                      {DType::kQ5_0, DType::kQ4_0}}) {
    ExpertShape s{gate_up, down, d, f};
    s.record_bytes = s.NaturalRecordBytes() + 20;
    out.push_back(s);
  }
  return out;
}

TEST(QuantExpertPackTest, RecordGroupsHoldTheCheckpointBlocksUnchanged) {
  for (DType dtype : BlockDTypes()) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t g = DTypeBlockElems(dtype);
    const int64_t d = 2 * g, f = 3 * g;  // Two blocks per gate row, three per down row.
    const Expert e = MakeExpert(dtype, d, f, 11);
    const size_t row = DTypeBytes(dtype, d), block = DTypeBytes(dtype, g);
    const size_t down_row = DTypeBytes(dtype, f);
    ASSERT_EQ(e.packed.size(), 3 * row * static_cast<size_t>(f));
    // By hand: group k = [gate rows kG..kG+G) | up rows | block k of down rows 0..d).
    const size_t group_bytes = 2 * static_cast<size_t>(g) * row + static_cast<size_t>(d) * block;
    ASSERT_EQ(group_bytes, static_cast<size_t>(g) * e.shape.RecordBytes());
    for (int64_t k = 0; k < f / g; ++k) {
      const std::byte* grp = e.packed.data() + static_cast<size_t>(k) * group_bytes;
      for (int64_t i = 0; i < g; ++i) {
        const size_t src = static_cast<size_t>(k * g + i) * row;
        ASSERT_EQ(std::memcmp(grp + i * row, &e.gate.bytes[src], row), 0) << "gate " << k * g + i;
        ASSERT_EQ(std::memcmp(grp + (g + i) * row, &e.up.bytes[src], row), 0) << "up " << k * g + i;
      }
      for (int64_t j = 0; j < d; ++j) {
        ASSERT_EQ(std::memcmp(grp + 2 * g * row + j * block,
                              &e.down.bytes[j * down_row + k * block], block),
                  0)
            << "down row " << j << " group " << k;
      }
    }
  }
}

// By hand, for gate/up and down in different formats: group k holds gate rows kG..kG+G), then
// the up rows, then for each down row j its G weights of the group (G / block size blocks),
// then zeros up to G * record bytes.
TEST(QuantExpertPackTest, MixedTypesPackIntoPaddedRecordGroups) {
  for (const ExpertShape& shape : MixedShapes(256, 512)) {
    SCOPED_TRACE(shape.DTypeLabel());
    const Expert e = MakeExpert(shape, 13);
    const int64_t g = shape.GroupNeurons(), d = 256, f = 512;
    ASSERT_EQ(g, std::max(DTypeBlockElems(shape.gate_up), DTypeBlockElems(shape.down)));
    const size_t row = DTypeBytes(shape.gate_up, d), run = DTypeBytes(shape.down, g);
    const size_t down_row = DTypeBytes(shape.down, f);
    const size_t used = 2 * g * row + d * run, group_bytes = g * (used / g + 20);
    ASSERT_EQ(used, static_cast<size_t>(g) * shape.NaturalRecordBytes());
    ASSERT_EQ(e.packed.size(), (f / g) * group_bytes);
    for (int64_t k = 0; k < f / g; ++k) {
      const std::byte* grp = e.packed.data() + k * group_bytes;
      for (int64_t i = 0; i < g; ++i) {
        const size_t src = (k * g + i) * row;
        ASSERT_EQ(std::memcmp(grp + i * row, &e.gate.bytes[src], row), 0) << "gate " << k * g + i;
        ASSERT_EQ(std::memcmp(grp + (g + i) * row, &e.up.bytes[src], row), 0) << "up " << k * g + i;
      }
      for (int64_t j = 0; j < d; ++j) {
        ASSERT_EQ(
            std::memcmp(grp + 2 * g * row + j * run, &e.down.bytes[j * down_row + k * run], run), 0)
            << "down row " << j << " group " << k;
      }
      for (size_t b = used; b < group_bytes; ++b) ASSERT_EQ(grp[b], std::byte{0}) << b;
    }
  }
}

TEST(QuantExpertPackTest, LayersArePaddedToTheWidestRecord) {
  // OLMoE's d = 2048 in Q4_K_M: q4_K rows of 1152 bytes, q6_K rows of 1680.
  const std::vector<ExpertShape> padded =
      PadToCommonShape({ExpertShape::Uniform(DType::kQ4_K, 2048, 1024),
                        {DType::kQ4_K, DType::kQ6_K, 2048, 1024},
                        {DType::kQ8_0, DType::kQ8_0, 2048, 1024}});
  for (const ExpertShape& s : padded) {
    EXPECT_EQ(s.GroupNeurons(), 256);
    EXPECT_EQ(s.RecordBytes(), 2u * 2176 + 2176);  // q8_0 is the widest: 64 blocks of 34 bytes.
  }
  EXPECT_EQ(padded[1].NaturalRecordBytes(), 2u * 1152 + 1680);
  EXPECT_THROW(PadToCommonShape({ExpertShape::Uniform(DType::kQ4_K, 256, 256),
                                 ExpertShape::Uniform(DType::kBF16, 256, 256)}),
               Error);
}

TEST(QuantExpertPackTest, ShapesThatAreNotWholeBlocksAreRefused) {
  const Matrix m = MakeMatrix(DType::kQ4_K, 256, 256, 1);
  const ExpertShape shape =
      ExpertShape::Uniform(DType::kQ4_K, 256, 128);  // 128 neurons: half a q4_K block.
  std::vector<std::byte> out(1 << 20);
  try {
    PackExpertNeuronMajor(View("g", DType::kQ4_K, {128, 256}, m),
                          View("u", DType::kQ4_K, {128, 256}, m),
                          View("d", DType::kQ4_K, {256, 128}, m), shape, out.data());
    ADD_FAILURE() << "a 128-neuron q4_K expert was packed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of 256"), std::string::npos) << e.what();
  }
}

TEST(QuantExpertKernelTest, SimdDecodersGiveCoreDequantizeBits) {
  ForEachTarget([&] {
    for (DType dtype : BlockDTypes()) {
      const int64_t n = 8 * DTypeBlockElems(dtype);
      Matrix m = MakeMatrix(dtype, 1, n, 3);
      // An all-zero block (zero scales) among the random ones.
      std::memset(m.bytes.data() + DTypeBytes(dtype, DTypeBlockElems(dtype)), 0,
                  DTypeBytes(dtype, DTypeBlockElems(dtype)));
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      Dequantize(*QuantFormatOf(dtype), reinterpret_cast<const uint8_t*>(m.bytes.data()), n,
                 want.data());
      DecodeQuantBlocks(dtype, m.bytes.data(), n, got.data());
      ASSERT_TRUE(BitEqual(want, got)) << DTypeName(dtype);
    }
  });
}

// Tolerance, as for the float kernels (kernels_expert_test.cc): g and u are f32 dots with
// error <= 1e-4 * sum|w x|, carried into h = silu(g) u, and the down sums add at most
// 1e-4 * sum|h down|. Only real bugs (O(1) errors) fail; the weights are the dequantised
// values exactly, so quantisation error is not part of the comparison. With int8
// activations the reference rounds x (in the gate/up format's blocks) and h (in the down
// format's) as the kernels do; an h value on a rounding boundary may round either way (one
// step more tolerance for it).
void ExpectMatchesReference(const Expert& e, const std::vector<float>& x, int64_t n,
                            const std::vector<float>& y0, const std::vector<float>& y) {
  const int64_t d = e.shape.hidden_size, f = e.shape.neurons;
  const bool int8 = GetActivationPrecision() == ActivationPrecision::kInt8;
  const size_t x_block = int8 ? static_cast<size_t>(Int8ActivationBlock(e.shape.gate_up)) : 0;
  const size_t h_block = int8 ? static_cast<size_t>(Int8ActivationBlock(e.shape.down)) : 0;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> ref(y0.begin() + t * d, y0.begin() + (t + 1) * d), tol(d, 1e-30);
    const RoundedActivations xr = RoundLikeInt8(&x[t * d], static_cast<size_t>(d), x_block);
    std::vector<float> h(static_cast<size_t>(f));
    std::vector<double> dh(static_cast<size_t>(f));
    for (int64_t i = 0; i < f; ++i) {
      double g = 0, u = 0, gm = 0, um = 0;
      for (int64_t k = 0; k < d; ++k) {
        const double xv = xr.values[k];
        g += e.gate.values[i * d + k] * xv;
        u += e.up.values[i * d + k] * xv;
        gm += std::fabs(e.gate.values[i * d + k] * xv);
        um += std::fabs(e.up.values[i * d + k] * xv);
      }
      const double silu = g / (1 + std::exp(-g));
      h[i] = static_cast<float>(silu * u);
      dh[i] = 1e-4 * (1.1 * std::fabs(u) * gm + std::fabs(silu) * um + std::fabs(silu * u));
    }
    const RoundedActivations hr = RoundLikeInt8(h.data(), static_cast<size_t>(f), h_block);
    for (int64_t i = 0; i < f; ++i) {
      const double flip = hr.near_half[i] ? hr.step[i] : 0.0;
      for (int64_t o = 0; o < d; ++o) {
        const double w = e.down.values[o * f + i];
        ref[o] += hr.values[i] * w;
        tol[o] += (dh[i] + 1e-4 * std::fabs(h[i]) + flip) * std::fabs(w);
      }
    }
    for (int64_t o = 0; o < d; ++o) {
      ASSERT_NEAR(y[t * d + o], ref[o], tol[o] + 1e-4 * std::fabs(y0[t * d + o]))
          << DTypeName(e.shape.gate_up) << " t=" << t << " o=" << o;
    }
  }
}

TEST(QuantExpertKernelTest, MatchesDoublePrecisionReferenceForEveryFormat) {
  ForEachFormatTargetAndPrecision([&](DType dtype) {
    const int64_t g = DTypeBlockElems(dtype);
    const int64_t d = 256, f = g == 256 ? 512 : 96;
    const Expert e = MakeExpert(dtype, d, f, 5);
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{17}}) {
      const std::vector<float> x = RandomVector(static_cast<size_t>(n * d), 6);
      const std::vector<float> y0 = RandomVector(static_cast<size_t>(n * d), 7);
      ExpectMatchesReference(e, x, n, y0, RunExpert(e, 0, f, x, n, y0));
    }
  });
}

TEST(QuantExpertKernelTest, ChunkBatchAndThreadInvariantBitExact) {
  ForEachFormatTargetAndPrecision([&](DType dtype) {
    const int64_t g = DTypeBlockElems(dtype);
    const int64_t d = 256, f = 4 * g;
    const Expert e = MakeExpert(dtype, d, f, 9);
    // 11 tokens take the widen-codes-once path (more than 8); 1, 2 and 5 the register tiles.
    const int64_t n = 11;
    const std::vector<float> x = RandomVector(static_cast<size_t>(n * d), 10);
    const std::vector<float> y0 = RandomVector(static_cast<size_t>(n * d), 11);
    const std::vector<float> whole = RunExpert(e, 0, f, x, n, y0);
    // Chunks of whole groups into the same accumulator.
    for (const std::vector<int64_t>& cuts :
         {std::vector<int64_t>{0, g, f}, {0, g, 2 * g, 3 * g, f}, {0, 3 * g, f}}) {
      std::vector<float> y = y0;
      for (size_t c = 0; c + 1 < cuts.size(); ++c) y = RunExpert(e, cuts[c], cuts[c + 1], x, n, y);
      ASSERT_TRUE(BitEqual(whole, y)) << cuts.size() - 1 << " chunks";
    }
    // Each token alone, and every pair, gives its row of the batch.
    for (int64_t len : {int64_t{1}, int64_t{2}, int64_t{5}}) {
      for (int64_t t = 0; t + len <= n; t += len) {
        const std::vector<float> xs(x.begin() + t * d, x.begin() + (t + len) * d);
        const std::vector<float> ys(y0.begin() + t * d, y0.begin() + (t + len) * d);
        const std::vector<float> part = RunExpert(e, 0, f, xs, len, ys);
        ASSERT_EQ(std::memcmp(part.data(), &whole[t * d], part.size() * sizeof(float)), 0)
            << "t=" << t << " len=" << len;
      }
    }
    // Thread counts (1 runs whole jobs, more split one big job by neurons and rows).
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      ASSERT_TRUE(BitEqual(whole, RunExpert(e, 0, f, x, n, y0, pool))) << threads << " threads";
    }
  });
}

// The expert kernels with int8 activations give the same bits on every SIMD target (see
// QuantLinearTest.Int8GivesTheSameBitsOnEveryTarget): one token and a batch.
TEST(QuantExpertKernelTest, Int8GivesTheSameBitsOnEveryTarget) {
  const ScopedActivationPrecision int8(ActivationPrecision::kInt8);
  for (DType dtype : BlockDTypes()) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t g = DTypeBlockElems(dtype);
    const int64_t d = 256, f = 2 * g;
    const Expert e = MakeExpert(dtype, d, f, 51);
    // 11 tokens: AVX-512's eight-token tiles of the 256-weight formats, then three.
    for (int64_t n : {int64_t{1}, int64_t{6}, int64_t{11}}) {
      const std::vector<float> x = RandomVector(static_cast<size_t>(n * d), 52);
      const std::vector<float> y0 = RandomVector(static_cast<size_t>(n * d), 53);
      std::vector<std::vector<float>> results;
      ForEachTarget([&] { results.push_back(RunExpert(e, 0, f, x, n, y0)); });
      ASSERT_FALSE(results.empty());
      for (size_t i = 1; i < results.size(); ++i)
        EXPECT_TRUE(BitEqual(results[0], results[i])) << "n=" << n << " target " << i;
    }
  }
}

// Mixed formats run the gate/up kernel of one and the down kernel of the other over the
// shared group: the same reference and the same invariances as one format.
TEST(QuantExpertKernelTest, MixedTypesMatchTheReferenceAndAreInvariant) {
  for (ActivationPrecision precision : kBothPrecisions) {
    const ScopedActivationPrecision scoped(precision);
    SCOPED_TRACE(ActivationPrecisionName(precision));
    ForEachTarget([&] {
      for (const ExpertShape& shape : MixedShapes(256, 768)) {
        SCOPED_TRACE(shape.DTypeLabel());
        const Expert e = MakeExpert(shape, 31);
        const int64_t d = 256, f = 768, g = 256;
        for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{11}}) {
          const std::vector<float> x = RandomVector(static_cast<size_t>(n * d), 32);
          const std::vector<float> y0 = RandomVector(static_cast<size_t>(n * d), 33);
          const std::vector<float> whole = RunExpert(e, 0, f, x, n, y0);
          ExpectMatchesReference(e, x, n, y0, whole);
          std::vector<float> y = y0;
          for (int64_t a = 0; a < f; a += g) y = RunExpert(e, a, a + g, x, n, y);
          ASSERT_TRUE(BitEqual(whole, y)) << "chunks, n=" << n;
          for (int threads : {1, 3}) {
            ThreadPool pool(threads);
            ASSERT_TRUE(BitEqual(whole, RunExpert(e, 0, f, x, n, y0, pool))) << threads;
          }
          if (n > 1) {
            const std::vector<float> last =
                RunExpert(e, 0, f, std::vector<float>(x.end() - d, x.end()), 1,
                          std::vector<float>(y0.end() - d, y0.end()));
            ASSERT_EQ(std::memcmp(last.data(), &whole[(n - 1) * d], d * sizeof(float)), 0);
          }
        }
      }
    });
  }
}

TEST(QuantExpertKernelTest, SeveralJobsGiveEachJobAloneAtAnyThreadCount) {
  for (ActivationPrecision precision : kBothPrecisions) {
    const ScopedActivationPrecision scoped(precision);
    SCOPED_TRACE(ActivationPrecisionName(precision));
    const DType dtype = DType::kQ4_K;
    const int64_t d = 256, f = 512;
    const std::vector<int64_t> tokens = {1, 3, 0, 2};
    std::vector<Expert> experts;
    std::vector<std::vector<float>> xs, y0s, alone;
    for (size_t j = 0; j < tokens.size(); ++j) {
      experts.push_back(MakeExpert(dtype, d, f, static_cast<uint32_t>(40 + 3 * j)));
      xs.push_back(RandomVector(static_cast<size_t>(tokens[j] * d), static_cast<uint32_t>(50 + j)));
      y0s.push_back(
          RandomVector(static_cast<size_t>(tokens[j] * d), static_cast<uint32_t>(60 + j)));
      ThreadPool one(1);
      alone.push_back(RunExpert(experts[j], 0, f, xs[j], tokens[j], y0s[j], one));
    }
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<std::vector<float>> ys = y0s;
      std::vector<ExpertJob> jobs;
      for (size_t j = 0; j < tokens.size(); ++j)
        jobs.push_back({experts[j].group_start(0), f, xs[j].data(), tokens[j], ys[j].data()});
      ExpertFfn(jobs, dtype, d, pool);
      for (size_t j = 0; j < tokens.size(); ++j)
        ASSERT_TRUE(BitEqual(ys[j], alone[j])) << "job " << j << " threads " << threads;
    }
  }
}

// Linear on block-format weights (dense layers of a quantized GGUF): against the double
// reference (an f32 dot is within 1e-5 * sum|w x| here; with int8 activations the integer
// sums are exact, and only the per-block float scaling rounds), and each token's row is the same
// bits alone, in tiles, past the 8-token switch, and at any thread count.
TEST(QuantLinearTest, MatchesReferenceAndIsBatchAndThreadInvariant) {
  ForEachFormatTargetAndPrecision([&](DType dtype) {
    const int64_t out = 43, in = 512, n = 13;  // 43: a last group of three rows.
    const Matrix w = MakeMatrix(dtype, out, in, 21);
    const std::vector<float> x = RandomVector(static_cast<size_t>(n * in), 22);
    const std::vector<float> bias = RandomVector(static_cast<size_t>(out), 23);
    // q4_0 and q8_0 also from their interleaved copy (what model weights carry).
    std::vector<std::byte> interleaved;
    for (bool use_interleaved : {false, true}) {
      if (use_interleaved) {
        if (InterleavedBlockBytes(dtype) == 0) continue;
        interleaved = InterleaveRows(w.bytes.data(), dtype, out, in);
      }
      SCOPED_TRACE(use_interleaved ? "interleaved" : "rows");
      const auto linear = [&](const float* xs, int64_t tokens, float* y, ThreadPool& pool) {
        LinearOutput o{w.bytes.data(), dtype, out, in, y, bias.data()};
        if (use_interleaved) o.interleaved = interleaved.data();
        LinearMulti(std::span<const LinearOutput>(&o, 1), xs, tokens, pool);
      };
      std::vector<float> all(static_cast<size_t>(n * out));
      linear(x.data(), n, all.data(), ThreadPool::Global());
      const size_t block = GetActivationPrecision() == ActivationPrecision::kInt8
                               ? static_cast<size_t>(Int8ActivationBlock(dtype))
                               : 0;
      for (int64_t t = 0; t < n; ++t) {
        const RoundedActivations xr = RoundLikeInt8(&x[t * in], static_cast<size_t>(in), block);
        for (int64_t o = 0; o < out; ++o) {
          double ref = bias[o], mag = std::fabs(bias[o]);
          for (int64_t k = 0; k < in; ++k) {
            ref += static_cast<double>(w.values[o * in + k]) * xr.values[k];
            mag += std::fabs(static_cast<double>(w.values[o * in + k]) * xr.values[k]);
          }
          ASSERT_NEAR(all[t * out + o], ref, 1e-5 * mag + 1e-30) << "t=" << t << " o=" << o;
        }
      }
      for (int64_t len : {int64_t{1}, int64_t{3}, int64_t{9}}) {
        for (int64_t t = 0; t + len <= n; t += len) {
          std::vector<float> part(static_cast<size_t>(len * out));
          linear(x.data() + t * in, len, part.data(), ThreadPool::Global());
          ASSERT_EQ(std::memcmp(part.data(), &all[t * out], part.size() * sizeof(float)), 0)
              << "t=" << t << " len=" << len;
        }
      }
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> y(all.size());
        linear(x.data(), n, y.data(), pool);
        ASSERT_TRUE(BitEqual(all, y)) << threads << " threads";
      }
    }
  });
}

// With int8 activations every sum is an exact integer, so every SIMD target gives the same
// bits (AVX3_DL's fused VNNI dot products against AVX2's maddubs pairs): random inputs, and
// inputs whose products all have the largest magnitude the format reaches (weights and
// activations of one magnitude, row 0's signs aligned with the activations'). It compares
// the targets this CPU runs (all three on Zen 4/5 and Ice Lake or later; one on AVX2-only
// CPUs).
TEST(QuantLinearTest, Int8GivesTheSameBitsOnEveryTarget) {
  const ScopedActivationPrecision int8(ActivationPrecision::kInt8);
  const int64_t out = 19, in = 512;
  for (DType dtype : BlockDTypes()) {
    SCOPED_TRACE(DTypeName(dtype));
    // 11 tokens: AVX-512's eight-token tiles of the 256-weight formats, then three.
    for (const auto& [n, extreme] : {std::pair<int64_t, bool>{5, false}, {5, true}, {11, false}}) {
      SCOPED_TRACE(extreme ? "extreme" : "random");
      std::vector<float> x = RandomVector(static_cast<size_t>(n * in), 41);
      std::vector<float> signs(static_cast<size_t>(out * in));
      for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < in; ++c)
          signs[static_cast<size_t>(r * in + c)] = ((r * c + c) % 3 == 0) ? -1.0f : 1.0f;
      if (extreme) {
        for (int64_t t = 0; t < n; ++t)
          for (int64_t c = 0; c < in; ++c)
            x[static_cast<size_t>(t * in + c)] = (t % 2 == 0 ? 1.0f : -1.0f) * signs[c];
      }
      const Matrix w = extreme ? MatrixOf(dtype, out, in, signs) : MakeMatrix(dtype, out, in, 42);
      std::vector<std::byte> interleaved;
      if (InterleavedBlockBytes(dtype) != 0)
        interleaved = InterleaveRows(w.bytes.data(), dtype, out, in);
      std::vector<std::vector<float>> results;  // Per target: rows, then interleaved.
      ForEachTarget([&] {
        std::vector<float> y(static_cast<size_t>(2 * n * out), 0.0f);
        LinearOutput o{w.bytes.data(), dtype, out, in, y.data(), nullptr};
        LinearMulti(std::span<const LinearOutput>(&o, 1), x.data(), n);
        if (!interleaved.empty()) {
          o.interleaved = interleaved.data();
          o.y = y.data() + n * out;
          LinearMulti(std::span<const LinearOutput>(&o, 1), x.data(), n);
        }
        results.push_back(std::move(y));
      });
      ASSERT_FALSE(results.empty());
      for (size_t i = 1; i < results.size(); ++i)
        EXPECT_TRUE(BitEqual(results[0], results[i])) << "target " << i;
    }
  }
}

// The interleaved copy: per group of eight rows and block, the rows' f16 scales, then their
// code bytes four at a time; a short last group padded with zero blocks.
TEST(QuantLinearTest, InterleavedLayoutByHand) {
  for (DType dtype : {DType::kQ4_0, DType::kQ8_0}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t rows = 11, cols = 64;
    const size_t block = DTypeBytes(dtype, 32), row_bytes = DTypeBytes(dtype, cols);
    std::vector<std::byte> w(static_cast<size_t>(rows) * row_bytes);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::byte>(i * 7 + 3);
    const std::vector<std::byte> v = InterleaveRows(w.data(), dtype, rows, cols);
    const size_t gb = InterleavedBlockBytes(dtype);
    ASSERT_EQ(gb, 16 + 8 * (block - 2));
    ASSERT_EQ(v.size(), 2 * 2 * gb);  // Two groups of eight rows, two blocks each.
    // Row 10 (group 1, lane 2), block 1: scale at 2 * 2, code bytes 4j..4j+3 at 16 + 32j + 8.
    const std::byte* src = w.data() + 10 * row_bytes + block;
    const std::byte* dst = v.data() + (1 * 2 + 1) * gb;
    EXPECT_EQ(std::memcmp(dst + 4, src, 2), 0);
    for (size_t j = 0; j < (block - 2) / 4; ++j)
      EXPECT_EQ(std::memcmp(dst + 16 + 32 * j + 8, src + 2 + 4 * j, 4), 0) << j;
    // Rows 11..15 of group 1 are zero.
    for (size_t j = 0; j < (block - 2) / 4; ++j)
      for (size_t r = 3; r < 8; ++r)
        for (size_t b = 0; b < 4; ++b)
          EXPECT_EQ(dst[16 + 32 * j + 4 * r + b], std::byte{0}) << j << " " << r;
  }
  EXPECT_THROW(InterleaveRows(nullptr, DType::kQ4_K, 8, 256), Error);
}

// Several outputs of one input in one call (q, k, v of different formats, activation blocks
// of 32 and 256, and an f32 one): with int8 activations the block outputs share one
// rounding of x per block size and one parallel region, and give each output's bits from a
// call of its own, at any thread count.
TEST(QuantLinearTest, SeveralOutputsGiveEachOutputAlone) {
  const int64_t in = 512, n = 5;
  const std::vector<float> x = RandomVector(static_cast<size_t>(n * in), 81);
  const std::vector<DType> dtypes = {DType::kQ4_K, DType::kQ6_K,  DType::kQ8_0,
                                     DType::kQ5_0, DType::kMXFP4, DType::kF32};
  const std::vector<int64_t> rows = {70, 33, 8, 17, 129, 9};
  for (ActivationPrecision precision : kBothPrecisions) {
    const ScopedActivationPrecision scoped(precision);
    SCOPED_TRACE(ActivationPrecisionName(precision));
    std::vector<Matrix> w;
    std::vector<std::vector<float>> alone, together;
    std::vector<LinearOutput> outs;
    for (size_t i = 0; i < dtypes.size(); ++i) {
      w.push_back(MakeMatrix(dtypes[i], rows[i], in, static_cast<uint32_t>(82 + i)));
      alone.emplace_back(static_cast<size_t>(n * rows[i]));
      Linear(w[i].bytes.data(), dtypes[i], rows[i], in, x.data(), n, alone[i].data());
    }
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      together.assign(dtypes.size(), {});
      outs.clear();
      for (size_t i = 0; i < dtypes.size(); ++i) {
        together[i].resize(alone[i].size());
        outs.push_back({w[i].bytes.data(), dtypes[i], rows[i], in, together[i].data(), nullptr});
      }
      LinearMulti(outs, x.data(), n, pool);
      for (size_t i = 0; i < dtypes.size(); ++i)
        ASSERT_TRUE(BitEqual(alone[i], together[i])) << DTypeName(dtypes[i]) << " " << threads;
    }
  }
}

// The SIMD rounding of activations to int8 is the scalar rule on every target: a random
// block with outliers, an all-zero block, and a block of exact halves (max 127, so x * 127
// / max = x: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, half to even).
TEST(QuantizeActivationsInt8Test, EveryTargetRoundsAsTheScalarRule) {
  ForEachTarget([&] {
    for (size_t block : {size_t{32}, size_t{256}}) {
      SCOPED_TRACE(block);
      const size_t k = 3 * block;
      std::vector<float> x = RandomVector(k, 71, 2.0f);
      for (size_t i = 0; i < block; i += 13) x[i] *= 9;
      std::fill(x.begin() + static_cast<std::ptrdiff_t>(block),
                x.begin() + static_cast<std::ptrdiff_t>(2 * block), 0.0f);
      for (size_t i = 2 * block; i < k; ++i) x[i] = static_cast<float>(i % 7) - 3.5f;
      x[2 * block] = 127.0f;
      x[2 * block + 1] = 2.5f;
      x[2 * block + 2] = -2.5f;
      std::vector<int8_t> q(k);
      std::vector<float> d(k / block);
      std::vector<int16_t> sums(k / 16);
      QuantizeActivationsInt8(x.data(), static_cast<int64_t>(k), static_cast<int64_t>(block),
                              q.data(), d.data(), sums.data());
      const RoundedActivations want = RoundLikeInt8(x.data(), k, block);
      for (size_t i = 0; i < k; ++i) {
        ASSERT_EQ(static_cast<double>(d[i / block]) * q[i], want.values[i]) << i;
        ASSERT_EQ(static_cast<double>(d[i / block]), want.step[i]) << i;
      }
      for (size_t j = 0; j < k / 16; ++j) {
        int sum = 0;
        for (size_t i = 0; i < 16; ++i) sum += q[16 * j + i];
        ASSERT_EQ(sums[j], sum) << j;
      }
      EXPECT_EQ(q[2 * block], 127);
      EXPECT_EQ(q[2 * block + 1], 2);
      EXPECT_EQ(q[2 * block + 2], -2);
      EXPECT_EQ(d[1], 0.0f);
    }
  });
  std::vector<float> x(40);
  std::vector<int8_t> q(40);
  std::vector<float> d(2);
  std::vector<int16_t> s(3);
  EXPECT_THROW(QuantizeActivationsInt8(x.data(), 40, 32, q.data(), d.data(), s.data()), Error);
}

// Every block format has an integer kernel, with activation blocks of its own block size.
TEST(QuantizeActivationsInt8Test, EveryBlockFormatHasAnIntegerKernel) {
  for (DType dtype : BlockDTypes())
    EXPECT_EQ(Int8ActivationBlock(dtype), DTypeBlockElems(dtype)) << DTypeName(dtype);
  EXPECT_EQ(Int8ActivationBlock(DType::kBF16), 0);
}

TEST(QuantExpertKernelTest, RefusesJobsThatAreNotWholeGroups) {
  const Expert e = MakeExpert(DType::kQ4_K, 256, 512, 1);
  std::vector<float> x(256), y(256);
  const ExpertJob job{e.group_start(0), 128, x.data(), 1, y.data()};
  EXPECT_THROW(ExpertFfn(std::span<const ExpertJob>(&job, 1), DType::kQ4_K, 256), Error);
}

}  // namespace
}  // namespace moex::kernels

// Q8_0 routed experts (GGUF): packing, the engine against the double-precision reference,
// resident == offloaded, and bad shapes. Packing a Q8_0 expert requantises its down columns
// along d (expert_layout.h); everything else is bit-exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "io/expert_store.h"
#include "kernels/quantize.h"
#include "model/expert_layout.h"
#include "model/expert_store_packer.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/tensor_names.h"
#include "support/engine_runs.h"
#include "support/reference_model.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

// --- Naive Q8_0, written out here so the tests do not trust the code under test. --------

float NaiveScale(const std::byte* block) {
  const uint16_t bits = static_cast<uint16_t>(static_cast<unsigned>(block[0]) |
                                              (static_cast<unsigned>(block[1]) << 8));
  return F16ToF32(bits);
}

// Element k of a row stored as Q8_0 blocks.
float NaiveQ8Value(const std::byte* row, int64_t k) {
  const std::byte* block = row + (k / 32) * 34;
  return NaiveScale(block) * static_cast<float>(static_cast<int8_t>(block[2 + k % 32]));
}

struct NaiveBlock {
  uint16_t scale_bits;
  int8_t q[32];
};

// GGML's reference quantiser: scale = max|x| / 127 (stored as f16), q = round(x / scale).
NaiveBlock NaiveQuantize(const float* x) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  NaiveBlock b;
  b.scale_bits = F32ToF16(scale);
  for (int i = 0; i < 32; ++i) {
    const float r = scale == 0.0f ? 0.0f : std::round(x[i] * (1.0f / scale));
    b.q[i] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
  }
  return b;
}

TensorView Q8View(const char* name, std::vector<int64_t> shape, const std::vector<std::byte>& v) {
  TensorView t;
  t.name = name;
  t.dtype = DType::kQ8_0;
  t.shape = std::move(shape);
  t.data = v.data();
  t.nbytes = v.size();
  return t;
}

// A [rows, cols] Q8_0 matrix of random values whose magnitude varies by row and column, so
// neighbouring blocks have different scales.
std::vector<std::byte> RandomQ8Matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<std::byte> out(DTypeBytes(DType::kQ8_0, rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      row[static_cast<size_t>(c)] =
          u(rng) * (1.0f + static_cast<float>(r % 7)) * (1.0f + static_cast<float>((c / 32) % 3));
    kernels::QuantizeQ8_0(row.data(), cols,
                          out.data() + static_cast<size_t>(r) * DTypeBytes(DType::kQ8_0, cols));
  }
  return out;
}

TEST(Q8ExpertPackTest, GateUpCopiedAndDownColumnRequantisedAlongD) {
  const int64_t d = 96, f = 64;  // Three blocks along d, two along F in each down row.
  const auto gate = RandomQ8Matrix(f, d, 1), up = RandomQ8Matrix(f, d, 2);
  const auto down = RandomQ8Matrix(d, f, 3);
  const ExpertShape shape{DType::kQ8_0, d, f};
  ASSERT_EQ(shape.RecordBytes(), 3u * 3u * 34u);
  std::vector<std::byte> packed(shape.ExpertBytes());
  PackExpertNeuronMajor(Q8View("g", {f, d}, gate), Q8View("u", {f, d}, up),
                        Q8View("d", {d, f}, down), shape, packed.data());
  const size_t row = 3 * 34, down_row = 2 * 34;
  double max_rel = 0;
  for (int64_t i = 0; i < f; ++i) {
    const std::byte* rec = packed.data() + static_cast<size_t>(i) * shape.RecordBytes();
    ASSERT_EQ(std::memcmp(rec, gate.data() + i * row, row), 0) << "gate row " << i;
    ASSERT_EQ(std::memcmp(rec + row, up.data() + i * row, row), 0) << "up row " << i;
    // Column i of down, one value per row j under row j's block scale.
    std::vector<float> column(static_cast<size_t>(d));
    for (int64_t j = 0; j < d; ++j)
      column[static_cast<size_t>(j)] = NaiveQ8Value(down.data() + j * down_row, i);
    std::vector<std::byte> want(row);
    kernels::QuantizeQ8_0(column.data(), d, want.data());
    EXPECT_EQ(std::memcmp(rec + 2 * row, want.data(), row), 0) << "down column " << i;
    for (int64_t b = 0; b < d / 32; ++b) {
      const NaiveBlock ref = NaiveQuantize(&column[static_cast<size_t>(b * 32)]);
      const std::byte* got = rec + 2 * row + b * 34;
      uint16_t got_scale;
      std::memcpy(&got_scale, got, 2);
      ASSERT_EQ(got_scale, ref.scale_bits) << "neuron " << i << " block " << b;
      const float scale = F16ToF32(ref.scale_bits);
      for (int k = 0; k < 32; ++k) {
        ASSERT_EQ(static_cast<int8_t>(got[2 + k]), ref.q[k])
            << "neuron " << i << " row " << b * 32 + k;
        // Rounding to the new grid moves a value by at most half a step, plus the f16
        // rounding of the scale (at most 127 * 2^-11 of a step).
        const float was = column[static_cast<size_t>(b * 32 + k)];
        const float now = NaiveQ8Value(rec + 2 * row, b * 32 + k);
        ASSERT_LE(std::fabs(now - was), 0.57f * scale) << i << "," << b * 32 + k;
        max_rel = std::max(max_rel, std::fabs(now - was) / (127.0 * scale));
      }
    }
  }
  EXPECT_GT(max_rel, 0.0) << "the requantisation should change some values";
}

TEST(Q8ExpertPackTest, ShapesThatAreNotWholeBlocksAreRefused) {
  const std::vector<std::byte> bytes(64 * 64, std::byte{0});
  auto expect_error = [&](int64_t d, int64_t f, const char* what) {
    const ExpertShape shape{DType::kQ8_0, d, f};
    try {
      CheckExpertTensors(Q8View("gate_proj", {f, d}, bytes), Q8View("up_proj", {f, d}, bytes),
                         Q8View("down_proj", {d, f}, bytes), shape);
      ADD_FAILURE() << "expected an error for d=" << d << " F=" << f;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
    }
  };
  expect_error(48, 32, "d = 48");
  expect_error(64, 40, "down_proj");
}

// --- Tiny Q8_0 GGUF models. ---------------------------------------------------------------

std::string WriteQ8Model(const testing::TempDir& dir, const ModelConfig& config,
                         const std::string& name) {
  RandomModelOptions o;
  o.config = config;
  o.dtype = DType::kF32;
  o.seed = 11;
  o.format = "gguf";
  o.gguf_type = DType::kQ8_0;
  o.out = dir / name;
  WriteRandomModel(o);
  return o.out;
}

// `base` with every routed expert's down matrix replaced by the f32 values the packed
// records hold (requantised along d by the naive quantiser above).
class RequantisedDown : public WeightSource {
 public:
  RequantisedDown(const Model& model) : base_(*model.weights) {
    const ModelConfig& c = model.config;
    const int64_t d = c.hidden_size, f = c.moe_intermediate_size;
    for (int l = 0; l < c.num_layers; ++l) {
      if (!c.IsMoeLayer(l)) continue;
      for (int e = 0; e < c.num_experts; ++e) {
        const std::string name = model.names.Expert(l, e, ExpertMatrix::kDown);
        const TensorView& src = base_.Get(name, {d, f});
        std::vector<float>& w = values_[name];
        w.resize(static_cast<size_t>(d * f));
        std::vector<float> column(static_cast<size_t>(d));
        for (int64_t i = 0; i < f; ++i) {
          for (int64_t j = 0; j < d; ++j)
            column[static_cast<size_t>(j)] = NaiveQ8Value(src.data + src.row_bytes() * j, i);
          for (int64_t b = 0; b < d / 32; ++b) {
            const NaiveBlock q = NaiveQuantize(&column[static_cast<size_t>(b * 32)]);
            for (int k = 0; k < 32; ++k)
              w[static_cast<size_t>((b * 32 + k) * f + i)] =
                  F16ToF32(q.scale_bits) * static_cast<float>(q.q[k]);
          }
        }
        TensorView& v = views_[name];
        v = src;
        v.dtype = DType::kF32;
        v.data = reinterpret_cast<const std::byte*>(w.data());
        v.nbytes = w.size() * sizeof(float);
      }
    }
  }
  const TensorView* Find(const std::string& name) const override {
    auto it = views_.find(name);
    return it != views_.end() ? &it->second : base_.Find(name);
  }
  std::vector<std::string> Names() const override { return base_.Names(); }
  std::string Describe() const override { return base_.Describe() + " (requantised down)"; }

  // Max and rms of |requantised - original| relative to the max and rms |original|.
  void Error(double* max_rel, double* rms_rel) const {
    double max_err = 0, max_w = 0, sq_err = 0, sq_w = 0;
    for (const auto& [name, w] : values_) {
      const TensorView& src = base_.Get(name);
      const int64_t f = src.cols();
      for (size_t k = 0; k < w.size(); ++k) {
        const int64_t j = static_cast<int64_t>(k) / f, i = static_cast<int64_t>(k) % f;
        const double was = NaiveQ8Value(src.data + src.row_bytes() * j, i);
        max_err = std::max(max_err, std::abs(w[k] - was));
        max_w = std::max(max_w, std::abs(was));
        sq_err += (w[k] - was) * (w[k] - was);
        sq_w += was * was;
      }
    }
    *max_rel = max_err / max_w;
    *rms_rel = std::sqrt(sq_err / sq_w);
  }

 private:
  const WeightSource& base_;
  std::map<std::string, std::vector<float>> values_;
  std::map<std::string, TensorView> views_;
};

struct LogitError {
  double max_ref = 0, max_err = 0;
};

LogitError Compare(const std::vector<float>& got, const std::vector<double>& ref) {
  LogitError e;
  EXPECT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    e.max_ref = std::max(e.max_ref, std::abs(ref[i]));
    e.max_err = std::max(e.max_err, std::abs(ref[i] - static_cast<double>(got[i])));
  }
  return e;
}

class Q8ReferenceTest : public ::testing::TestWithParam<Arch> {};

TEST_P(Q8ReferenceTest, LogitsMatchReferenceOnGgufBlocks) {
  testing::TempDir dir;
  const ModelConfig config = RandomModelConfig(GetParam(), ModelSize::kTiny);
  auto model = LoadModel(WriteQ8Model(dir, config, "q8.gguf"));
  ASSERT_EQ(model->expert_shape.dtype, DType::kQ8_0);
  // MLA with q_lora_rank (deepseek_v3) has q_a_proj where the others have q_proj.
  const TensorView* q = model->layers[0].q != nullptr ? model->layers[0].q : model->layers[0].q_a;
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kQ8_0);
  EXPECT_EQ(model->embed->dtype, DType::kQ8_0);
  const int moe = config.first_k_dense_replace;
  EXPECT_EQ(model->layers[static_cast<size_t>(moe)].router->dtype, DType::kF32);  // Kept.

  ResidentMoeExecutor executor(*model);
  const std::vector<int32_t> ids = {1, 17, 300, 42, 42, 511, 0, 99, 256, 7, 64, 128, 3};
  const std::vector<float> logits = testing::PrefillLogits(*model, executor, ids);

  // 1. Against the reference on exactly the weights the engine computes with (the GGUF's
  // blocks, down requantised): f32 activation rounding only, as in engine_reference_test.
  const RequantisedDown requantised(*model);
  const LogitError exact =
      Compare(logits, testing::ReferenceLogits(model->config, requantised, ids));
  EXPECT_LT(exact.max_err, 1e-4 * std::max(1.0, exact.max_ref))
      << "max |logit| " << exact.max_ref << ", error " << exact.max_err;

  // Sparsemixer's weights jump where a score crosses its mask threshold ((m - s) / |s| =
  // 2 * jitter, 0.02 here), and near-ties are common with tiny random routers: any weight
  // perturbation, requantisation included, can move a token across one (measured: 17 % of
  // the logit scale on the phimoe tiny model, against 33 % for the f32 -> q8_0 step). The
  // bound below assumes logits that move smoothly with the weights, so it stops here.
  if (config.router == RouterKind::kSparseMixer) return;

  // 2. Against the reference on the GGUF's own blocks: the double quantisation of down is
  // the only other difference. Requantising moves each down weight by at most ~0.57 of its
  // new step (max|block| / 127): about 0.4% of the weights' scale, max and rms alike. That
  // perturbs each expert output by ~0.4%, and the logits by 0.25-0.4% of their scale on
  // these models (measured), 5-15x less than the f32 -> Q8_0 quantisation of the GGUF
  // itself. The 1.5% bound is ~4x the measured effect and still catches a mispacked column
  // (a swapped or misscaled column moves logits by tens of percent).
  double max_w = 0, rms_w = 0;
  requantised.Error(&max_w, &rms_w);
  const LogitError gguf =
      Compare(logits, testing::ReferenceLogits(model->config, *model->weights, ids));

  // For scale: the same model's f32 source against its Q8_0 GGUF (both references).
  RandomModelOptions f32;
  f32.config = config;
  f32.dtype = DType::kF32;
  f32.seed = 11;
  f32.out = dir / "f32";
  WriteRandomModel(f32);
  auto source = LoadModel(f32.out);
  const std::vector<double> ref_q8 = testing::ReferenceLogits(model->config, *model->weights, ids);
  std::vector<float> ref_q8_f(ref_q8.begin(), ref_q8.end());
  const LogitError quant =
      Compare(ref_q8_f, testing::ReferenceLogits(source->config, *source->weights, ids));
  std::printf(
      "%s q8_0 down requantisation: weights max %.3g rms %.3g (relative); logits max "
      "error %.3g of max |logit| %.3g (%.3g relative); f32 -> q8_0 itself: %.3g "
      "relative\n",
      ArchName(GetParam()), max_w, rms_w, gguf.max_err, gguf.max_ref, gguf.max_err / gguf.max_ref,
      quant.max_err / quant.max_ref);
  EXPECT_LT(rms_w, 0.005);
  EXPECT_LT(max_w, 0.006);
  EXPECT_LT(gguf.max_err, 1.5e-2 * std::max(1.0, gguf.max_ref))
      << "max |logit| " << gguf.max_ref << ", error " << gguf.max_err;
  EXPECT_LT(gguf.max_err / gguf.max_ref, quant.max_err / quant.max_ref)
      << "requantising down should cost less than quantising the model did";
}

INSTANTIATE_TEST_SUITE_P(Archs, Q8ReferenceTest,
                         ::testing::Values(Arch::kOlmoe, Arch::kMixtral, Arch::kQwen2Moe,
                                           Arch::kQwen3Moe, Arch::kDeepseekMoe, Arch::kPhiMoe,
                                           Arch::kDeepseekV2, Arch::kDeepseekV3),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

TEST(Q8ModelTest, OffloadedIsBitIdenticalToResident) {
  testing::TempDir dir;
  // Wider than tiny so a Q8_0 record (3 * 8 blocks * 34 = 816 bytes) needs blocks of 256
  // neurons for 4 KiB alignment and an expert spans two fetch chunks (1024 + 512 neurons).
  ModelConfig c = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  c.hidden_size = 256;
  c.moe_intermediate_size = 1536;
  c.num_layers = 2;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  auto model = LoadModel(WriteQ8Model(dir, c, "olmoe-q8-wide.gguf"));
  ResidentMoeExecutor resident(*model);
  const std::vector<int32_t> prompt = {3, 141, 59, 26, 53, 58, 97, 93, 23, 84};
  const std::vector<float> want_logits = testing::PrefillLogits(*model, resident, prompt);
  const auto want_tokens = testing::GreedyTokens(*model, resident);
  for (const char* budget : {"25%", "5%", "100%"}) {
    SCOPED_TRACE(budget);
    OffloadOptions o;
    o.store_path = dir / "experts.moex";
    o.host_budget = budget;
    o.policy = "lru";
    o.progress = false;
    OffloadMoeExecutor offload(*model, o);
    EXPECT_EQ(offload.tier().store().dtype(), DType::kQ8_0);
    EXPECT_EQ(offload.tier().store().record_bytes(), 816u);
    EXPECT_EQ(offload.tier().store().blocks_per_expert(), 6);
    EXPECT_EQ(testing::PrefillLogits(*model, offload, prompt), want_logits);
    EXPECT_EQ(testing::GreedyTokens(*model, offload), want_tokens);
    const tiers::OffloadMetrics m = offload.Metrics();
    EXPECT_LE(m.peak_host_cache_bytes, m.budget_bytes);
    EXPECT_GT(m.total.counters.misses, 0);
  }
  // Every block verifies; the dtype is part of the staleness check; damage is caught.
  const std::string path = dir / "experts.moex";
  ExpertStore store = ExpertStore::Open(path);
  EXPECT_EQ(store.header().dtype, 3u);
  store.VerifyData();
  const std::string source_id = CheckpointFingerprint(model->path);
  EXPECT_EQ(StoreMismatch(store, model->config, DType::kQ8_0, source_id), "");
  EXPECT_NE(StoreMismatch(store, model->config, DType::kBF16, source_id).find("dtype"),
            std::string::npos);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(store.ExpertOffset(1, 2) + 5 * 816 + 100));
    f.put('\x5a');
  }
  try {
    store.VerifyData();
    ADD_FAILURE() << "a damaged block was not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1 expert 2 block 0"), std::string::npos)
        << e.what();
  }
}

TEST(Q8StoreTest, BlocksOfQ8RecordsAreWholePages) {
  // R = 3 * (d / 32) * 34 bytes: 204 (d = 64), 816 (d = 256), 6528 (d = 2048).
  EXPECT_EQ(StoreBlockNeurons(204, 32), 32u);  // 1024 needed, capped at F: one block.
  EXPECT_EQ(StoreBlockNeurons(204, 4096), 1024u);
  EXPECT_EQ(StoreBlockNeurons(816, 1536), 256u);
  EXPECT_EQ(StoreBlockNeurons(6528, 1024), 32u);
  for (uint64_t r : {204u, 816u, 6528u}) EXPECT_EQ(StoreBlockNeurons(r, 1u << 20) * r % 4096, 0u);
}

TEST(Q8ModelTest, TinyOffloadedAt25PercentLruIsBitIdentical) {
  testing::TempDir dir;
  auto model = LoadModel(
      WriteQ8Model(dir, RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny), "olmoe-q8.gguf"));
  ResidentMoeExecutor resident(*model);
  OffloadOptions o;
  o.store_path = dir / "experts.moex";
  o.host_budget = "25%";
  o.policy = "lru";
  o.progress = false;
  OffloadMoeExecutor offload(*model, o);
  const std::vector<int32_t> prompt = {3, 141, 59, 26, 53, 58, 97, 93, 23, 84};
  EXPECT_EQ(testing::PrefillLogits(*model, offload, prompt),
            testing::PrefillLogits(*model, resident, prompt));
  EXPECT_EQ(testing::GreedyTokens(*model, offload), testing::GreedyTokens(*model, resident));
  EXPECT_GT(offload.Metrics().total.counters.misses, 0);
}

TEST(Q8ModelTest, WriterRefusesExpertsThatAreNotWholeBlocks) {
  testing::TempDir dir;
  ModelConfig c = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  c.hidden_size = 48;
  try {
    WriteQ8Model(dir, c, "bad.gguf");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.gguf"));
  RandomModelOptions hf;
  hf.config = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  hf.gguf_type = DType::kQ8_0;
  hf.out = dir / "hf";
  EXPECT_THROW(WriteRandomModel(hf), Error);
}

}  // namespace
}  // namespace moex

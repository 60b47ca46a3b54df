// Q8_0 routed experts (GGUF): the engine against the double-precision reference on the
// GGUF's own blocks (packing keeps them bit for bit, in record groups of 32 neurons:
// expert_layout.h), resident == offloaded, and bad shapes. Every block format's packing and
// kernels are tested in kernels_quant_expert_test.cc.
#include <gtest/gtest.h>

#include <algorithm>

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
#include "kernels/activation_precision.h"
#include "kernels/quantize.h"
#include "model/expert_layout.h"
#include "model/expert_store_packer.h"
#include "model/model_identity.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/tensor_names.h"
#include "support/engine_runs.h"
#include "support/reference_model.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

TensorView Q8View(const char* name, std::vector<int64_t> shape, const std::vector<std::byte>& v) {
  TensorView t;
  t.name = name;
  t.dtype = DType::kQ8_0;
  t.shape = std::move(shape);
  t.data = v.data();
  t.nbytes = v.size();
  return t;
}

TEST(Q8ExpertPackTest, ShapesThatAreNotWholeBlocksAreRefused) {
  const std::vector<std::byte> bytes(64 * 64, std::byte{0});
  auto expect_error = [&](int64_t d, int64_t f, const char* what) {
    const ExpertShape shape = ExpertShape::Uniform(DType::kQ8_0, d, f);
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
  // The reference is the exact dot of the dequantised weights: f32 activations.
  const kernels::ScopedActivationPrecision f32_activations(kernels::ActivationPrecision::kF32);
  testing::TempDir dir;
  const ModelConfig config = RandomModelConfig(GetParam(), ModelSize::kTiny);
  auto model = LoadModel(WriteQ8Model(dir, config, "q8.gguf"));
  ASSERT_EQ(model->expert_shape.gate_up, DType::kQ8_0);
  // The first attention layer's (Gated DeltaNet layers have none); MLA with q_lora_rank
  // (deepseek_v3) has q_a_proj where the others have q_proj.
  const LayerWeights* attn = &model->layers[0];
  for (const LayerWeights& L : model->layers)
    if (L.q != nullptr || L.q_a != nullptr) {
      attn = &L;
      break;
    }
  const TensorView* q = attn->q != nullptr ? attn->q : attn->q_a;
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kQ8_0);
  EXPECT_EQ(model->embed->dtype, DType::kQ8_0);
  int moe = 0;  // The first MoE layer (Llama 4's tiny shape: layer 1).
  while (!config.IsMoeLayer(moe)) ++moe;
  ASSERT_NE(model->layers[static_cast<size_t>(moe)].router, nullptr);
  EXPECT_EQ(model->layers[static_cast<size_t>(moe)].router->dtype, DType::kF32);  // Kept.

  ResidentMoeExecutor executor(*model);
  const std::vector<int32_t> ids = {1, 17, 300, 42, 42, 511, 0, 99, 256, 7, 64, 128, 3};
  const std::vector<float> logits = testing::PrefillLogits(*model, executor, ids);

  // Against the reference on exactly the GGUF's blocks, which the engine now computes with
  // unchanged: f32 activation rounding only, as in engine_reference_test. (Store version 2
  // requantised the down columns and was 0.25-0.38 % of the logit scale away here.)
  const LogitError exact =
      Compare(logits, testing::ReferenceLogits(model->config, *model->weights, ids));
  EXPECT_LT(exact.max_err, 1e-4 * std::max(1.0, exact.max_ref))
      << "max |logit| " << exact.max_ref << ", error " << exact.max_err;
}

INSTANTIATE_TEST_SUITE_P(Archs, Q8ReferenceTest,
                         ::testing::Values(Arch::kOlmoe, Arch::kMixtral, Arch::kQwen2Moe,
                                           Arch::kQwen3Moe, Arch::kDeepseekMoe, Arch::kPhiMoe,
                                           Arch::kDeepseekV2, Arch::kDeepseekV3, Arch::kGlm4Moe,
                                           Arch::kMiniMaxM2, Arch::kQwen3Next, Arch::kQwen35Moe, Arch::kLlama4),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

// q4_0 / q8_0 Linear weights get their interleaved copy (kernels/interleave.h) at load when
// the process computes with int8 activations, and only then (f32 would never read it: the
// model's copy then holds the blocks as stored, model_linear_copies_test.cc).
TEST(Q8ModelTest, LinearWeightsAreInterleavedOnlyForInt8Activations) {
  testing::TempDir dir;
  const std::string path =
      WriteQ8Model(dir, RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny), "olmoe-q8.gguf");
  {
    const kernels::ScopedActivationPrecision f32(kernels::ActivationPrecision::kF32);
    auto model = LoadModel(path);
    EXPECT_EQ(model->layers[0].q->interleaved, nullptr);
    EXPECT_EQ(model->lm_head->interleaved, nullptr);
  }
  const kernels::ScopedActivationPrecision int8(kernels::ActivationPrecision::kInt8);
  auto model = LoadModel(path);
  for (const TensorView* t : {model->layers[0].q, model->layers[0].o, model->lm_head}) {
    ASSERT_EQ(t->dtype, DType::kQ8_0);
    ASSERT_NE(t->interleaved, nullptr) << t->name;
    EXPECT_TRUE(std::any_of(model->linear_views.begin(), model->linear_views.end(),
                            [&](const TensorView& v) { return &v == t; }));
  }
  EXPECT_EQ(model->embed->interleaved, nullptr);  // Rows looked up, never multiplied.
}

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
    o.policy.spec = "lru";
    o.progress = false;
    OffloadMoeExecutor offload(*model, o);
    const ExpertStore& packed = offload.tier().store();
    EXPECT_EQ(packed.gate_up_dtype(packed.moe_layers().front()), DType::kQ8_0);
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
  EXPECT_EQ(store.header().layer_dtypes[0], 3u);  // q8_0 gate/up and down.
  EXPECT_EQ(store.header().layer_dtypes[1], 3u);
  EXPECT_EQ(store.header().group_neurons, 32u);
  store.VerifyData();
  const std::string source_id = ModelContentId(model->path);
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
  o.policy.spec = "lru";
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

// The Q4_K_M mix is a choice between q4_K and q6_K: asked of another type it is refused.
TEST(Q8ModelTest, WriterRefusesTheQ4KMMixForAnotherType) {
  testing::TempDir dir;
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  o.format = "gguf";
  o.gguf_type = DType::kQ8_0;
  o.gguf_q4_k_m = true;
  o.out = dir / "mix.gguf";
  try {
    WriteRandomModel(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K_M mix quantises to q4_K"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(o.out));
}

}  // namespace
}  // namespace moex

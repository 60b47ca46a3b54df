// The lossless promise (docs/design.md, principle 3) on whole models: logits and greedy tokens
// of the offloading executor are bit-identical to the fully resident executor for every
// budget and policy, and the host cache never exceeds its budget.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/quant_format.h"
#include "engine/generator.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "kernels/activation_precision.h"
#include "model/model.h"
#include "support/engine_runs.h"
#include "support/reference_model.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

// Offloaded logits and greedy tokens equal the resident executor's bit for bit at 5, 25, 50
// and 100 % budgets under every listed policy, within the budget.
void ExpectLosslessAtEveryBudget(const std::string& model_path, const std::string& tag,
                                 std::initializer_list<const char*> policies) {
  auto model = LoadModel(model_path);
  const std::vector<int32_t> prompt = {3, 141, 59, 26, 53, 58, 97, 93, 23, 84};
  ResidentMoeExecutor resident(*model);
  const std::vector<float> want_logits = testing::PrefillLogits(*model, resident, prompt);
  const auto want_tokens = testing::GreedyTokens(*model, resident);
  const std::string store = (std::filesystem::temp_directory_path() /
                             ("moex_lossless_" + std::to_string(getpid()) + "_" + tag + ".moex"))
                                .string();
  for (const char* budget : {"5%", "25%", "50%", "100%"}) {
    for (const char* policy : policies) {
      SCOPED_TRACE(std::string(policy) + " at " + budget);
      OffloadOptions o;
      o.store_path = store;
      o.host_budget = budget;
      o.policy.spec = policy;
      o.progress = false;
      OffloadMoeExecutor offload(*model, o);
      EXPECT_EQ(testing::PrefillLogits(*model, offload, prompt), want_logits);
      EXPECT_EQ(testing::GreedyTokens(*model, offload), want_tokens);
      const tiers::OffloadMetrics m = offload.Metrics();
      EXPECT_LE(m.peak_host_cache_bytes, m.budget_bytes);
      EXPECT_GT(m.total.counters.misses, 0);
      EXPECT_GT(m.total.bytes_read, 0u);
      if (std::string(budget) == "5%") {
        EXPECT_EQ(m.total.counters.hits, 0) << m.ToJson().dump();
      }
    }
  }
  std::filesystem::remove(store);
}

class OffloadLosslessTest : public ::testing::TestWithParam<Arch> {};

TEST_P(OffloadLosslessTest, BitIdenticalToResidentForEveryBudgetAndPolicy) {
  ExpectLosslessAtEveryBudget(testing::TinyModelPath(GetParam()), ArchName(GetParam()),
                              {"ondemand", "lru", "lfu", "random", "nextgate"});
}

constexpr kernels::ActivationPrecision kBothPrecisions[] = {kernels::ActivationPrecision::kF32,
                                                            kernels::ActivationPrecision::kInt8};

// Quantized GGUF experts: the store keeps their blocks, chunks are whole record groups, and
// the block-format kernels are chunk invariant, so offloading stays lossless per format.
class QuantOffloadLosslessTest : public ::testing::TestWithParam<QuantFormat> {};

TEST_P(QuantOffloadLosslessTest, BitIdenticalToResidentForEveryBudget) {
  const DType type = DTypeOf(GetParam());
  const std::string path = testing::TinyQuantModelPath(type);
  ASSERT_EQ(LoadModel(path)->expert_shape.gate_up, type) << "experts were not kept in blocks";
  for (kernels::ActivationPrecision precision : kBothPrecisions) {
    const kernels::ScopedActivationPrecision scoped(precision);
    ExpectLosslessAtEveryBudget(path, DTypeName(type), {"lru", "nextgate"});
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantOffloadLosslessTest, ::testing::ValuesIn(kAllQuantFormats),
                         [](const auto& info) { return std::string(QuantFormatName(info.param)); });

// A Q4_K_M file: q4_K/q4_K layers beside a q4_K/q6_K layer, all kept in their blocks (padded
// to one record size), offloaded as losslessly as one format.
TEST(QuantOffloadLosslessTest, Q4KMMixBitIdenticalToResidentForEveryBudget) {
  const std::string path = testing::TinyQ4KMModelPath();
  const auto model = LoadModel(path);
  EXPECT_EQ(model->ExpertDTypeLabel(), "mixed q4_K, q4_K/q6_K");
  EXPECT_EQ(model->layers[2].expert_shape.down, DType::kQ6_K);
  EXPECT_EQ(model->layers[0].expert_shape.RecordBytes(),
            model->layers[2].expert_shape.NaturalRecordBytes());
  // With f32 activations the kernels compute on the file's blocks exactly: against the
  // double-precision reference on the same (dequantised) weights, f32 rounding only. Int8
  // activations add their rounding (about 1 % of the logit scale here).
  const std::vector<int32_t> ids = {1, 17, 300, 42, 42, 511, 0, 99, 256, 7};
  const std::vector<double> ref = testing::ReferenceLogits(model->config, *model->weights, ids);
  for (kernels::ActivationPrecision precision : kBothPrecisions) {
    const kernels::ScopedActivationPrecision scoped(precision);
    const bool int8 = precision == kernels::ActivationPrecision::kInt8;
    ResidentMoeExecutor resident(*model);
    const std::vector<float> logits = testing::PrefillLogits(*model, resident, ids);
    const testing::LogitGap gap = testing::CompareLogits(logits, ref);
    EXPECT_LT(gap.max_err, (int8 ? 5e-2 : 1e-4) * gap.scale) << gap.max_err << " of " << gap.scale;
    if (int8) {
      EXPECT_GT(gap.max_err, 1e-4 * gap.scale) << "int8 activations were not used";
    }
    ExpectLosslessAtEveryBudget(path, "q4_k_m", {"lru", "nextgate"});
  }
}

TEST(OffloadFaultTest, ReadErrorFailsTheRequestAndTheNextRequestWorks) {
  auto model = LoadModel(testing::TinyModelPath(Arch::kOlmoe));
  ResidentMoeExecutor resident(*model);
  const auto want = testing::GreedyTokens(*model, resident);
  OffloadOptions o;
  o.store_path = (std::filesystem::temp_directory_path() /
                  ("moex_fault_" + std::to_string(getpid()) + ".moex"))
                     .string();
  o.host_budget = "25%";
  o.policy.spec = "lru";
  o.progress = false;
  OffloadMoeExecutor offload(*model, o);
  offload.tier().InjectReadError(3);
  try {
    testing::GreedyTokens(*model, offload);
    ADD_FAILURE() << "the injected read error was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("injected I/O error"), std::string::npos) << e.what();
  }
  EXPECT_EQ(testing::GreedyTokens(*model, offload), want);
  std::filesystem::remove(o.store_path);
}

INSTANTIATE_TEST_SUITE_P(Archs, OffloadLosslessTest,
                         ::testing::Values(Arch::kOlmoe, Arch::kQwen2Moe, Arch::kMixtral,
                                           Arch::kDeepseekMoe, Arch::kPhiMoe, Arch::kDeepseekV2,
                                           Arch::kDeepseekV3, Arch::kGlm4Moe, Arch::kGptOss,
                                           Arch::kMiniMaxM2, Arch::kQwen3Next, Arch::kQwen35Moe, Arch::kLlama4),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

}  // namespace
}  // namespace moex

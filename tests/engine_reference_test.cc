// Every architecture's logits against the independent double-precision reference forward
// pass (tests/support/reference_model.cc), on tiny random checkpoints.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "support/reference_model.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

struct Case {
  Arch arch;
  DType dtype;
};

class EngineReferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(EngineReferenceTest, LogitsMatchDoublePrecisionReference) {
  const Case c = GetParam();
  auto model = LoadModel(testing::TinyModelPath(c.arch, c.dtype));
  ResidentMoeExecutor executor(*model);
  Transformer transformer(*model, executor);
  const std::vector<int32_t> ids = {1, 17, 300, 42, 42, 511, 0, 99, 256, 7, 64, 128, 3};
  KvCache cache(model->config, static_cast<int64_t>(ids.size()));
  BatchItem item{&cache, ids, true};
  const std::vector<float> logits = transformer.Forward({&item, 1});
  const std::vector<double> ref = testing::ReferenceLogits(model->config, *model->weights, ids);
  ASSERT_EQ(logits.size(), ref.size());
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(ref[i]));
    max_err = std::max(max_err, std::abs(ref[i] - static_cast<double>(logits[i])));
  }
  // The engine rounds activations to f32 (24-bit mantissa) at every step while the reference
  // keeps doubles; over 3 layers of width 64 the accumulated relative error stays near
  // 1e-6. Weights are identical in both (stored values, widened exactly), so any error
  // above 1e-4 of the logit scale is a real bug, not rounding.
  EXPECT_LT(max_err, 1e-4 * std::max(1.0, max_ref))
      << ArchName(c.arch) << " max |logit| " << max_ref << ", max error " << max_err;
}

INSTANTIATE_TEST_SUITE_P(
    AllArchitectures, EngineReferenceTest,
    ::testing::Values(Case{Arch::kOlmoe, DType::kBF16}, Case{Arch::kMixtral, DType::kBF16},
                      Case{Arch::kQwen2Moe, DType::kBF16}, Case{Arch::kQwen3Moe, DType::kBF16},
                      Case{Arch::kDeepseekMoe, DType::kBF16}, Case{Arch::kOlmoe, DType::kF16},
                      Case{Arch::kMixtral, DType::kF32}, Case{Arch::kPhiMoe, DType::kBF16},
                      Case{Arch::kPhiMoe, DType::kF32}, Case{Arch::kDeepseekV2, DType::kBF16},
                      Case{Arch::kDeepseekV3, DType::kBF16}, Case{Arch::kDeepseekV3, DType::kF32},
                      Case{Arch::kGlm4Moe, DType::kBF16}, Case{Arch::kGlm4Moe, DType::kF32},
                      Case{Arch::kGptOss, DType::kBF16}, Case{Arch::kGptOss, DType::kF32},
                      Case{Arch::kMiniMaxM2, DType::kBF16}, Case{Arch::kMiniMaxM2, DType::kF32},
                      Case{Arch::kQwen3Next, DType::kBF16}, Case{Arch::kQwen3Next, DType::kF32},
                      Case{Arch::kQwen35Moe, DType::kBF16}, Case{Arch::kQwen35Moe, DType::kF32},
                      Case{Arch::kLlama4, DType::kBF16}, Case{Arch::kLlama4, DType::kF32}),

    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(ArchName(info.param.arch)) + "_" + DTypeName(info.param.dtype);
    });

}  // namespace
}  // namespace moex

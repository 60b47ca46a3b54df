// Configurations that would compute garbage without a word are refused when loaded:
// non-finite or non-positive rope_theta, negative shared-expert counts; and non-finite
// logits stop sampling with an error.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/sampler.h"
#include "model/model_config.h"
#include "model/random_model.h"

namespace moex {
namespace {

std::string ErrorOf(const nlohmann::json& config) {
  try {
    ModelConfig::FromHfJson(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Qwen2-MoE's and Qwen3-MoE's decoder_sparse_step counts layers from one, as HF's decoder
// layer does ((layer + 1) % step == 0): with step 2 the MoE layers are 1 and 3, not 0 and 2;
// the config written back says the same.
TEST(ConfigValidation, QwenDecoderSparseStepCountsLayersFromOne) {
  for (Arch arch : {Arch::kQwen2Moe, Arch::kQwen3Moe}) {
    nlohmann::json j = RandomModelConfig(arch, ModelSize::kTiny).ToHfJson();
    j["num_hidden_layers"] = 4;
    j["decoder_sparse_step"] = 2;
    const ModelConfig c = ModelConfig::FromHfJson(j);
    EXPECT_FALSE(c.IsMoeLayer(0));
    EXPECT_TRUE(c.IsMoeLayer(1));
    EXPECT_FALSE(c.IsMoeLayer(2));
    EXPECT_TRUE(c.IsMoeLayer(3));
    const ModelConfig back = ModelConfig::FromHfJson(c.ToHfJson());
    for (int l = 0; l < 4; ++l) EXPECT_EQ(back.IsMoeLayer(l), c.IsMoeLayer(l)) << l;
  }
}

TEST(ConfigValidation, RopeThetaMustBeFiniteAndPositive) {
  nlohmann::json j = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny).ToHfJson();
  EXPECT_EQ(ErrorOf(j), "");
  for (double theta : {0.0, -10000.0, 1e300}) {  // 1e300 is infinite as a float.
    SCOPED_TRACE(theta);
    j["rope_theta"] = theta;
    EXPECT_NE(ErrorOf(j).find("rope_theta"), std::string::npos) << ErrorOf(j);
  }
}

TEST(ConfigValidation, IntegersOutsideIntAreRefusedNotWrapped) {
  nlohmann::json j = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny).ToHfJson();
  // 2^32 + 512 once served with a context of 512.
  for (const nlohmann::json& v :
       {nlohmann::json(int64_t{1} << 32), nlohmann::json((int64_t{1} << 32) + 512),
        nlohmann::json(std::numeric_limits<uint64_t>::max())}) {
    j["max_position_embeddings"] = v;
    const std::string error = ErrorOf(j);
    EXPECT_NE(error.find("'max_position_embeddings' out of range: " + v.dump()), std::string::npos)
        << error;
  }
}

TEST(ConfigValidation, SharedExpertSizesMustNotBeNegative) {
  nlohmann::json deepseek = RandomModelConfig(Arch::kDeepseekMoe, ModelSize::kTiny).ToHfJson();
  EXPECT_EQ(ErrorOf(deepseek), "");
  deepseek["n_shared_experts"] = -1;
  EXPECT_NE(ErrorOf(deepseek).find("n_shared_experts"), std::string::npos) << ErrorOf(deepseek);

  nlohmann::json qwen = RandomModelConfig(Arch::kQwen2Moe, ModelSize::kTiny).ToHfJson();
  EXPECT_EQ(ErrorOf(qwen), "");
  qwen["shared_expert_intermediate_size"] = -64;
  EXPECT_NE(ErrorOf(qwen).find("shared expert intermediate size"), std::string::npos)
      << ErrorOf(qwen);
}

TEST(ConfigValidation, NonFiniteLogitsAreAnError) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THROW(CheckFiniteLogits(std::vector<float>{0.5f, nan, 1.0f}), Error);
  EXPECT_THROW(CheckFiniteLogits(std::vector<float>{inf, 0.0f}), Error);
  EXPECT_THROW(CheckFiniteLogits(std::vector<float>{0.0f, -inf}), Error);
  EXPECT_NO_THROW(CheckFiniteLogits(std::vector<float>{0.5f, -3e38f, 3e38f}));
}

}  // namespace
}  // namespace moex

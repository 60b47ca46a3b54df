// Log probabilities for OpenAI's logprobs: log-softmax of the raw logits, the sampled token's
// value and the most likely alternatives, hand-computed.
#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace moex {
namespace {

TEST(Logprobs, LogSoftmaxOfTheTokenAndTheTopAlternatives) {
  const std::vector<float> logits = {1, 2, 3, 2};
  // log(e^1 + 2 e^2 + e^3) = 3.6802...; each logprob is the logit minus it.
  const double log_z = std::log(std::exp(1.0) + 2 * std::exp(2.0) + std::exp(3.0));
  const TokenLogprobs lp = ComputeLogprobs(logits, 1, 3);
  EXPECT_EQ(lp.token, 1);
  EXPECT_NEAR(lp.logprob, 2 - log_z, 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 2);
  EXPECT_NEAR(lp.top[0].second, 3 - log_z, 1e-6);
  EXPECT_EQ(lp.top[1].first, 1) << "ties go to the lower id";
  EXPECT_EQ(lp.top[2].first, 3);
  EXPECT_NEAR(lp.top[2].second, 2 - log_z, 1e-6);
  EXPECT_TRUE(ComputeLogprobs(logits, 0, 0).top.empty());
  EXPECT_EQ(ComputeLogprobs(logits, 0, 50).top.size(), 4u) << "clamped to the vocabulary";
}

TEST(Logprobs, LargeLogitsDoNotOverflow) {
  const std::vector<float> logits = {1000, 1000, -1000};
  const TokenLogprobs lp = ComputeLogprobs(logits, 0, 1);
  EXPECT_NEAR(lp.logprob, -std::log(2.0), 1e-6);
  EXPECT_TRUE(std::isfinite(ComputeLogprobs(logits, 2, 0).logprob));
}

}  // namespace
}  // namespace moex

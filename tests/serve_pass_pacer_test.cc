// PassPacer (serve/pass_pacer.h) on hand-computed passes: the learnt means, the slack, and
// the rules that keep prompts moving.
#include <gtest/gtest.h>

#include "serve/pass_pacer.h"

namespace moex::serve {
namespace {

TEST(PassPacer, OffOrWithoutDecodesNothingWaits) {
  PassPacer off(0);
  EXPECT_FALSE(off.enabled());
  off.Observe(4, 0, 10);
  off.Observe(4, 100, 1000);
  EXPECT_TRUE(off.AllowsPrefill(4, 1000));
  EXPECT_EQ(off.slack_ms(), 0);

  PassPacer on(20);
  on.Observe(4, 0, 10);
  on.Observe(4, 100, 1000);
  EXPECT_TRUE(on.AllowsPrefill(0, 1000));  // No decode waits on this pass.
  EXPECT_TRUE(on.AllowsPrefill(4, 0));
}

TEST(PassPacer, NothingWaitsBeforeItsCostIsKnown) {
  PassPacer p(20);
  EXPECT_FALSE(p.Predict(1, 0).has_value());
  EXPECT_TRUE(p.AllowsPrefill(1, 512));
  p.Observe(2, 0, 10);  // Decode-only: mean 10 ms.
  EXPECT_DOUBLE_EQ(*p.Predict(2, 0), 10);
  EXPECT_FALSE(p.Predict(2, 8).has_value());
  EXPECT_TRUE(p.AllowsPrefill(2, 512));
}

TEST(PassPacer, MeansAndPredictions) {
  PassPacer p(20);
  p.Observe(2, 0, 10);     // Decode mean 10.
  p.Observe(2, 0, 14);     // 0.75 * 10 + 0.25 * 14 = 11.
  p.Observe(2, 100, 111);  // (111 - 11) / 100 = 1 ms per prompt token.
  EXPECT_DOUBLE_EQ(*p.Predict(2, 0), 11);
  EXPECT_DOUBLE_EQ(*p.Predict(2, 8), 19);
  p.Observe(0, 10, 30);  // Prefill alone: 3 ms per token; 0.75 * 1 + 0.25 * 3 = 1.5.
  EXPECT_DOUBLE_EQ(*p.Predict(0, 10), 15);
  EXPECT_DOUBLE_EQ(*p.Predict(1, 10), 26);
  p.Observe(1, 1, 5);  // Faster than the decode mean alone: counts as 0 per token.
  EXPECT_DOUBLE_EQ(*p.Predict(0, 4), 4 * 0.75 * 1.5);
}

TEST(PassPacer, SlackDecidesAndIsBounded) {
  PassPacer p(20, /*window_passes=*/2);  // Slack within +-40 ms.
  p.Observe(1, 0, 10);                   // Slack 20 - 10 = 10; decode mean 10.
  EXPECT_DOUBLE_EQ(p.slack_ms(), 10);
  p.Observe(1, 10, 60);  // (60 - 10) / 10 = 5 ms per token; slack 10 + 20 - 60 = -30.
  EXPECT_DOUBLE_EQ(p.slack_ms(), -30);
  EXPECT_FALSE(p.AllowsPrefill(1, 1));  // 10 + 5 = 15 > 20 - 30.
  p.Observe(1, 0, 10);                  // Slack -20.
  p.Observe(1, 0, 10);                  // Slack -10.
  EXPECT_FALSE(p.AllowsPrefill(1, 2));  // 10 + 10 = 20 > 20 - 10.
  p.Observe(1, 0, 10);                  // Slack 0.
  EXPECT_TRUE(p.AllowsPrefill(1, 2));   // 20 <= 20.
  EXPECT_FALSE(p.AllowsPrefill(1, 3));  // 25 > 20.
  for (int i = 0; i < 5; ++i) p.Observe(1, 0, 10);
  EXPECT_DOUBLE_EQ(p.slack_ms(), 40);     // 50, kept to the window.
  EXPECT_TRUE(p.AllowsPrefill(1, 1000));  // A full window lets any chunk through.
  p.Observe(1, 1000, 5010);               // Slack 40 + 20 - 5010, kept to -40.
  EXPECT_DOUBLE_EQ(p.slack_ms(), -40);
  EXPECT_FALSE(p.AllowsPrefill(1, 1));
}

TEST(PassPacer, AnUnattainableTargetHoldsNothingBack) {
  PassPacer p(20);
  p.Observe(1, 8, 400);  // 50 ms per prompt token (no decode mean yet); slack -380.
  p.Observe(1, 0, 10);   // Decode mean 10: 20 is attainable.
  EXPECT_FALSE(p.AllowsPrefill(1, 1));
  p.Observe(1, 0, 70);  // Decode mean 0.75 * 10 + 0.25 * 70 = 25 >= 20.
  EXPECT_TRUE(p.AllowsPrefill(1, 8));
}

}  // namespace
}  // namespace moex::serve

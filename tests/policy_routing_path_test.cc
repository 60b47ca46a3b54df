#include "policy/common/routing_path.h"

#include <gtest/gtest.h>

namespace moex::policy {
namespace {

TEST(RoutingPath, SetTestAndCountAcrossWordBoundaries) {
  RoutingPath p(2, 130);  // Three words per layer.
  p.Set(0, 0);
  p.Set(0, 63);
  p.Set(0, 64);
  p.Set(1, 129);
  EXPECT_TRUE(p.Test(0, 63));
  EXPECT_TRUE(p.Test(0, 64));
  EXPECT_FALSE(p.Test(1, 0));
  EXPECT_TRUE(p.Test(1, 129));
  EXPECT_EQ(p.Count(), 4);
  EXPECT_EQ(p.CountLayer(0), 3);
  EXPECT_EQ(p.CountLayer(1), 1);
  EXPECT_THROW(p.Set(2, 0), std::out_of_range);
  EXPECT_THROW(p.Set(0, 130), std::out_of_range);
}

TEST(RoutingPath, OrAndHammingOnHandComputedPaths) {
  // Layer 0: a = {0,1}, b = {1,2}; layer 1: a = {3}, b = {3}.
  RoutingPath a(2, 4), b(2, 4);
  a.Set(0, 0), a.Set(0, 1), a.Set(1, 3);
  b.Set(0, 1), b.Set(0, 2), b.Set(1, 3);
  EXPECT_EQ(a.Hamming(b), 2);  // Experts 0 and 2 of layer 0.
  EXPECT_EQ(a.CountAnd(b), 2);
  RoutingPath batch = a;
  batch.OrWith(b);
  EXPECT_EQ(batch.Count(), 4);  // {0,1,2} in layer 0, {3} in layer 1.
  EXPECT_THROW(a.OrWith(RoutingPath(2, 5)), std::invalid_argument);
}

}  // namespace
}  // namespace moex::policy

// What the registry says of each policy beyond its name and roles.
#include "policy/registry.h"

#include <gtest/gtest.h>

namespace moex::policy {
namespace {

// The engine warns of budgets below one pass for the evictors that evict by recency alone;
// it reads that from the registry, not from a policy's name.
TEST(PolicyRegistry, OnlyLruEvictsByRecencyAlone) {
  ASSERT_NE(FindPolicy("lru"), nullptr);
  EXPECT_TRUE(FindPolicy("lru")->recency_eviction);
  EXPECT_TRUE(FindPolicy("ondemand")->recency_eviction);  // lru's alias.
  for (const PolicyInfo* info : RegisteredPolicies()) {
    if (info->name != "lru") {
      EXPECT_FALSE(info->recency_eviction) << info->name;
    }
  }
  EXPECT_FALSE(FindPolicy("cycle-lru")->recency_eviction);
}

}  // namespace
}  // namespace moex::policy

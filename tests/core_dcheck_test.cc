// MOEX_DCHECK: internal invariants, tested in debug builds only, with their message built
// only on failure.
#include "core/dcheck.h"

#include <gtest/gtest.h>

#include <ostream>

namespace moex {
namespace {

// Counts how often it is streamed, i.e. how often a message with it was built.
struct Counted {
  int* count;
};
std::ostream& operator<<(std::ostream& out, const Counted& c) {
  ++*c.count;
  return out << "counted";
}

TEST(Dcheck, FollowsNdebug) {
#ifdef NDEBUG
  EXPECT_FALSE(kDebugChecks);
#else
  EXPECT_TRUE(kDebugChecks);
#endif
}

TEST(Dcheck, OffEvaluatesNeitherConditionNorMessage) {
  int evaluated = 0, built = 0;
  MOEX_DCHECK_IF(false, ++evaluated == 0, Counted{&built});
  EXPECT_EQ(evaluated, 0);
  EXPECT_EQ(built, 0);
}

TEST(Dcheck, OnBuildsTheMessageOnlyOnFailure) {
  int evaluated = 0, built = 0;
  MOEX_DCHECK_IF(true, ++evaluated == 1, Counted{&built});
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(built, 0);
}

TEST(Dcheck, OnAbortsNamingTheCheck) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // Other tests leave pool threads behind.
  EXPECT_DEATH(MOEX_DCHECK_IF(true, 1 + 1 == 3, "x=", 7),
               "moex: internal error at .*core_dcheck_test\\.cc:[0-9]+: check `1 \\+ 1 == 3` "
               "failed: x=7");
}

}  // namespace
}  // namespace moex

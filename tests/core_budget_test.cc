#include "core/budget.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace moex {
namespace {

TEST(Budget, SizesAndPercentages) {
  EXPECT_EQ(ParseBudget("4GiB", 0), 4ll << 30);
  EXPECT_EQ(ParseBudget("512MiB", 0), 512ll << 20);
  EXPECT_EQ(ParseBudget("1.5g", 0), 3ll << 29);
  EXPECT_EQ(ParseBudget("2k", 0), 2048);
  EXPECT_EQ(ParseBudget("25%", 1000), 250);
  EXPECT_EQ(ParseBudget("33%", 10), 3);  // Rounded down to whole bytes.
  EXPECT_EQ(ParseBudget("1000", 0), 1000);
  EXPECT_EQ(ParseBudget("1000b", 0), 1000);
}

TEST(Budget, BadBudgetsAreNamed) {
  for (const char* bad : {"lots", "4 parsecs", "-1GiB", "inf", "9000000TiB"}) {
    try {
      ParseBudget(bad, 100);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace moex

// Progress lines of long operations: off a terminal, one line per tenth of the work.
#include "core/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace moex {
namespace {

TEST(Progress, OffATerminalPrintsOneLinePerTenth) {
  ::testing::internal::CaptureStderr();
  {
    Progress p("steps", 20);
    for (int i = 1; i <= 20; ++i) p.Update(i);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  // Tenths 0..10 are first reached at 1, 2, 4, 6, ..., 20.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 11) << err;
  EXPECT_EQ(err.rfind("moex: steps 1/20\nmoex: steps 2/20\nmoex: steps 4/20\n", 0), 0u) << err;
  EXPECT_NE(err.find("moex: steps 20/20\n"), std::string::npos) << err;
  EXPECT_EQ(err.find("steps 3/20"), std::string::npos) << err;
}

TEST(Progress, TerminalOnlyProgressIsSilentInPipesAndEmptyWorkIsSilent) {
  ::testing::internal::CaptureStderr();
  {
    Progress quiet("tokens", 5, true);
    for (int i = 1; i <= 5; ++i) quiet.Update(i);
    Progress none("nothing", 0);
    none.Update(0);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace moex

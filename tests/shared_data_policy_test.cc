// Tests that need ../shared/data: under CI (CI=true or CI=1) its absence is a failure.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "support/shared_data.h"

namespace moex {
namespace {

class CiEnvironment {
 public:
  CiEnvironment() {
    if (const char* v = std::getenv("CI")) saved_ = v, had_ = true;
  }
  ~CiEnvironment() {
    if (had_) {
      setenv("CI", saved_.c_str(), 1);
    } else {
      unsetenv("CI");
    }
  }

 private:
  std::string saved_;
  bool had_ = false;
};

TEST(SharedDataPolicy, RequiredExactlyUnderCi) {
  const CiEnvironment restore;
  unsetenv("CI");
  EXPECT_FALSE(testing::SharedDataRequired());
  setenv("CI", "true", 1);
  EXPECT_TRUE(testing::SharedDataRequired());
  setenv("CI", "1", 1);
  EXPECT_TRUE(testing::SharedDataRequired());
  setenv("CI", "false", 1);
  EXPECT_FALSE(testing::SharedDataRequired());
}

}  // namespace
}  // namespace moex

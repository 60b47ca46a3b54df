#include "kernels/cpu_requirements.h"

#include <gtest/gtest.h>

#include "hwy/targets.h"
#include "kernels/ops.h"

namespace moex::kernels {
namespace {

// The test binary's kernels were compiled for x86-64-v3, so a host running them has every
// feature; and the feature list agrees with Highway's own detection of its AVX2 target.
TEST(CpuRequirements, HostRunningTheKernelsHasEveryFeature) {
  EXPECT_EQ(MissingCpuFeatures(), "");
  EXPECT_NO_THROW(CheckCpuRequirements());
#if defined(__x86_64__)
  EXPECT_NE(hwy::SupportedTargets() & HWY_AVX2, 0) << SimdTargetName();
#endif
}

}  // namespace
}  // namespace moex::kernels

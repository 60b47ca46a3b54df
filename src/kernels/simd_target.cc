// Reports which Highway target the kernels dispatch to.
#include "kernels/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd_target.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace moex::kernels::HWY_NAMESPACE {

int64_t CurrentTarget() {
  return HWY_TARGET;
}

}  // namespace moex::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moex::kernels {

HWY_EXPORT(CurrentTarget);

std::string SimdTargetName() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(CurrentTarget)());
}

std::vector<int64_t> AvailableSimdTargets() {
  return hwy::SupportedAndGeneratedTargets();
}

}  // namespace moex::kernels
#endif  // HWY_ONCE

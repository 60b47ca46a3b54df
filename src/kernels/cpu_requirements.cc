#include "kernels/cpu_requirements.h"

#include "core/error.h"

namespace moex::kernels {

std::string MissingCpuFeatures() {
  std::string missing;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const auto need = [&](bool present, const char* name) {
    if (present) return;
    if (!missing.empty()) missing += ", ";
    missing += name;
  };
  need(__builtin_cpu_supports("avx2"), "avx2");
  need(__builtin_cpu_supports("fma"), "fma");
  need(__builtin_cpu_supports("bmi2"), "bmi2");
  need(__builtin_cpu_supports("pclmul"), "pclmul");
  need(__builtin_cpu_supports("aes"), "aes");
#endif
  return missing;
}

void CheckCpuRequirements() {
  const std::string missing = MissingCpuFeatures();
  if (!missing.empty()) {
    throw Error("this CPU lacks " + missing +
                ": moex's kernels need an x86-64-v3 CPU (AVX2 and FMA: Intel Haswell, AMD "
                "Zen or newer)");
  }
}

}  // namespace moex::kernels

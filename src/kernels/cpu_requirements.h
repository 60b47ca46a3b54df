// The instruction sets the kernels are compiled to assume (CMakeLists.txt: the Highway kernel
// files take x86-64-v3 as their baseline), checked once at start so that an older CPU gets a
// clear message instead of an illegal-instruction crash inside the first kernel.
#pragma once

#include <string>

namespace moex::kernels {

// The required features this CPU lacks, comma-separated ("" when it has them all, and on
// architectures other than x86-64, where the build keeps its generic baseline).
std::string MissingCpuFeatures();

// Throws Error naming the missing features when MissingCpuFeatures() is not empty.
void CheckCpuRequirements();

}  // namespace moex::kernels

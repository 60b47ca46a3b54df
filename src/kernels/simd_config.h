// Which Highway targets the kernels are compiled for. Included first by every kernels
// translation unit so that they all agree on the dispatch set.
//
// Kept: AVX3_DL (AVX-512 with VNNI and the Ice Lake additions: Zen 4/5, Ice Lake and
// later; the int8 kernels use its fused dot products), AVX3 (AVX-512) and AVX2. The kernel
// files are compiled with x86-64-v3 as their baseline (CMakeLists.txt), so no older target
// is built; SSSE3/SSE4 are disabled here too for any file compiled without that baseline.
// `moex` refuses a CPU without AVX2 at start (kernels/cpu_requirements.h).
#pragma once

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1
#endif
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif

// The AVX-512 targets (32 vector registers, 512-bit vectors), for tile sizes and lookups;
// evaluated where used, once per target.
#define MOEX_AVX512_TARGET (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)

// Which Highway targets the kernels are compiled for. Included first by every kernels
// translation unit so that they all agree on the dispatch set.
//
// Kept: AVX3 (AVX-512), AVX2 and the portable scalar baseline. SSSE3/SSE4 add compile time
// but no speed that matters for a server CPU, so they are left out; a pre-AVX2 CPU falls back
// to the scalar target. The build's baseline flags stay generic x86-64.
#pragma once

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif

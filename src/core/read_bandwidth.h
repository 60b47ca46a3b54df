// The machine's streaming-read memory bandwidth, measured the way decode reads weights:
// every thread of the global pool reads its own contiguous slice of a buffer far larger
// than the last-level cache. Decode figures are reported as a share of it (`moex bench
// --membw`, bench/kernels_bench, bench/membw).
#pragma once

#include <cstddef>

namespace moex {

// GB/s (1e9 bytes/s), best of several passes: by wall clock, and by process CPU time per
// thread (what the threads achieve while they run; the honest figure on a shared machine).
struct ReadBandwidth {
  double wall_gb_per_s = 0;
  double cpu_gb_per_s = 0;
};

// Reads a freshly written `bytes` buffer `passes` times with every pool thread.
ReadBandwidth MeasureReadBandwidth(size_t bytes, int passes);

}  // namespace moex

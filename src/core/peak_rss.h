// The peak resident set size of this process, as reports and /metrics give it.
#pragma once

#include <cstdint>

namespace moex {

// VmHWM from /proc/self/status, in bytes; -1 where it cannot be read.
int64_t PeakRssBytes();

}  // namespace moex

// Monotonic timing helpers used by metrics and benchmarks.
#pragma once

#include <chrono>

namespace moex {

using Clock = std::chrono::steady_clock;

inline double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  double ElapsedMs() const { return MillisSince(start_); }
  void Reset() { start_ = Clock::now(); }

 private:
  Clock::time_point start_;
};

}  // namespace moex

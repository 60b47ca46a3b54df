// Axis ticks for the sweep report's charts. Every axis starts at 0 and steps in a 1-2-5
// series (…, 0.5, 1, 2, 5, 10, 20, …), so tick labels are short round numbers that a reader
// can interpolate between.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace moex::sim {

struct AxisTicks {
  double step = 1;             // 1, 2 or 5 times a power of ten
  double top = 1;              // last tick: the smallest multiple of step >= the largest value
  int decimals = 0;            // digits after the point that write every tick exactly
  std::vector<double> values;  // 0, step, 2 * step, ..., top
};

// mantissa * 10^exponent, dividing for negative exponents so that 2 * 10^-1 is the double
// nearest 0.2 (multiplying by an inexact 0.1 would not be).
inline double ScaleByPow10(double mantissa, int exponent) {
  return exponent >= 0 ? mantissa * std::pow(10.0, exponent) : mantissa / std::pow(10.0, -exponent);
}

// The smallest step of the 1-2-5 series that is >= raw (raw > 0).
inline double NiceStep(double raw) {
  const int exponent = static_cast<int>(std::floor(std::log10(raw)));
  const double fraction = raw / ScaleByPow10(1, exponent);  // in [1, 10)
  // The slack absorbs rounding in the division: a raw step of exactly 0.2 must stay 0.2.
  constexpr double kSlack = 1e-9;
  const double mantissa = fraction <= 1 + kSlack   ? 1
                          : fraction <= 2 + kSlack ? 2
                          : fraction <= 5 + kSlack ? 5
                                                   : 10;
  return ScaleByPow10(mantissa, exponent);
}

// Ticks from 0 to at least max_value in at most max_intervals nice steps.
// Example: 0.87 -> step 0.2, ticks 0, 0.2, ..., 1.0; 1234 -> step 500, ticks 0, 500, 1000, 1500.
inline AxisTicks NiceTicks(double max_value, int max_intervals = 5) {
  if (!(max_value > 0)) max_value = 1;  // An all-zero series still gets a readable axis.
  AxisTicks ticks;
  ticks.step = NiceStep(max_value / std::max(max_intervals, 1));
  // The tolerance keeps a value that is a multiple of the step (100 % at step 20 %) from
  // growing one more interval through rounding.
  const int intervals = std::max(1, static_cast<int>(std::ceil(max_value / ticks.step - 1e-9)));
  ticks.top = intervals * ticks.step;
  ticks.decimals = std::max(0, -static_cast<int>(std::floor(std::log10(ticks.step) + 1e-9)));
  for (int i = 0; i <= intervals; ++i) ticks.values.push_back(i * ticks.step);
  return ticks;
}

}  // namespace moex::sim

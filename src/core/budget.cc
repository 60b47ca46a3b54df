#include "core/budget.h"

#include <cctype>
#include <cmath>

#include "core/error.h"

namespace moex {

int64_t ParseBudget(const std::string& text, int64_t all_bytes) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    Fail("invalid budget '", text, "' (examples: 4GiB, 512MiB, 25%)");
  }
  std::string unit = text.substr(used);
  for (char& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double scale = 1;
  if (unit == "%")
    scale = static_cast<double>(all_bytes) / 100.0;
  else if (unit == "k" || unit == "kib" || unit == "kb")
    scale = 1024.0;
  else if (unit == "m" || unit == "mib" || unit == "mb")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gb")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib" || unit == "tb")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    Check(unit.empty() || unit == "b", "invalid budget unit in '", text, "'");
  Check(std::isfinite(value), "invalid budget '", text, "': not a finite number");
  Check(value >= 0, "budget must not be negative: '", text, "'");
  const double bytes = std::floor(value * scale);
  // 2^62 bytes is beyond any machine; larger values would overflow int64_t.
  Check(bytes < 0x1p62, "budget '", text, "' is too large (at most 4 EiB)");
  return static_cast<int64_t>(bytes);
}

}  // namespace moex

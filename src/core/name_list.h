// Lists of names for messages, shortened when long.
#pragma once

#include <string>
#include <vector>

namespace moex {

// "a, b, c, d and 3 more": the first `shown` names and a count of the rest.
inline std::string NameList(const std::vector<std::string>& names, size_t shown = 4) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

}  // namespace moex

#include "io/gguf_split_name.h"

#include <cstdio>

namespace moex {

std::string GgufSplitPartPath(const std::string& prefix, int64_t no, int64_t count) {
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, "-%05lld-of-%05lld.gguf", static_cast<long long>(no),
                static_cast<long long>(count));
  return prefix + suffix;
}

std::optional<GgufSplitName> ParseGgufSplitName(const std::string& path) {
  // "-" 5 digits "-of-" 5 digits ".gguf": 20 characters at the end.
  constexpr size_t kSuffix = 20;
  if (path.size() <= kSuffix) return std::nullopt;
  const std::string s = path.substr(path.size() - kSuffix);
  auto digits = [&](size_t at) {
    int64_t v = 0;
    for (size_t i = at; i < at + 5; ++i) {
      if (s[i] < '0' || s[i] > '9') return int64_t{-1};
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  if (s[0] != '-' || s.compare(6, 4, "-of-") != 0 || s.compare(15, 5, ".gguf") != 0)
    return std::nullopt;
  const int64_t no = digits(1);
  const int64_t count = digits(10);
  if (no < 1 || count < 1 || no > count) return std::nullopt;
  return GgufSplitName{path.substr(0, path.size() - kSuffix), no, count};
}

std::vector<std::string> GgufPartPaths(const std::string& path) {
  const std::optional<GgufSplitName> split = ParseGgufSplitName(path);
  if (!split || split->no != 1) return {path};
  std::vector<std::string> parts;
  for (int64_t k = 1; k <= split->count; ++k)
    parts.push_back(GgufSplitPartPath(split->prefix, k, split->count));
  return parts;
}

}  // namespace moex

// llama.cpp's gguf-split file naming: a model in N parts is PREFIX-00001-of-0000N.gguf,
// PREFIX-00002-of-0000N.gguf, ... Shared by the reader (which opens the other parts) and
// the model's identity (which covers every part).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moex {

struct GgufSplitName {
  std::string prefix;  // Path up to "-000KK-of-000NN.gguf".
  int64_t no = 0;      // 1-based part number.
  int64_t count = 0;   // Parts in all.
};

// PREFIX-0000K-of-0000N.gguf for part `no` (1-based) of `count`.
std::string GgufSplitPartPath(const std::string& prefix, int64_t no, int64_t count);

// The parts of `path` when its name follows the split naming (1 <= no <= count), else none.
std::optional<GgufSplitName> ParseGgufSplitName(const std::string& path);

// Every part's path, in order, when `path` is named as the first part of a split GGUF;
// otherwise just `path`. Does not check that the parts exist.
std::vector<std::string> GgufPartPaths(const std::string& path);

}  // namespace moex

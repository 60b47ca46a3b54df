// Reading the small files a model directory or a command names (config.json,
// tokenizer.json, generation_config.json, policy states, profiles): each is read whole, only
// when it is a regular file, and only up to a stated size, so a FIFO never blocks, /dev/zero
// never fills memory, and a directory where a file should be is named as a directory
// instead of being reported as missing (issue 41). Model weights are mapped, not read: see
// io/mapped_file.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace moex {

// The size limits of the files above: generous for every published checkpoint (the largest
// tokenizer.json files are ~35 MB, the largest index.json ~10 MB), small beside memory.
inline constexpr size_t kMaxConfigFileBytes = size_t{64} << 20;
inline constexpr size_t kMaxTokenizerFileBytes = size_t{1} << 30;
// Files of data a command reads whole: policy states, prompt sets, routing logs.
inline constexpr size_t kMaxDataFileBytes = size_t{4} << 30;

// What a path names, following symbolic links: "a directory", "a FIFO", "a character
// device", "a block device", "a socket", "a regular file", or "" when nothing is there.
std::string DescribePath(const std::string& path);

// True when `path` is a regular file; false when nothing is there. Throws Error naming the
// path and what it is when something else (a directory, a FIFO, a device) is in its place,
// or when it cannot be examined (permissions), so "has no X" messages mean only absence.
bool RegularFileExists(const std::string& path);

// The whole content of a regular file of at most `max_bytes`. Throws Error naming the path
// when it is missing, is not a regular file, is larger, or cannot be read.
std::string ReadInputFile(const std::string& path, size_t max_bytes);

}  // namespace moex

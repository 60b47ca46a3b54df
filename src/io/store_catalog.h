// The expert stores in a directory (the cache directory of `moex store list` / `moex store
// rm`): what each holds and where it came from, and removing one with everything packing
// left beside it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moex {

struct StoreEntry {
  std::string path;
  uint64_t bytes = 0;          // On disk.
  std::string arch;            // From the header; empty when unreadable.
  std::string source_path;     // The model it was packed from.
  bool source_exists = false;  // Whether that model is still there.
  uint64_t created_unix = 0;
  std::string problem;  // Why it cannot be used ("" when its header and table are sound).
};

// Every *.experts.moex file in `dir` (no recursion), sorted by name; none when `dir` does not
// exist. Reads only headers and tables.
std::vector<StoreEntry> ListExpertStores(const std::string& dir);

// Removes the store at `path` and what packing leaves beside it: its ".corrupt" flag and the
// temporary files of packers that are no longer running. Throws Error, removing nothing,
// when `path` is not a moex expert store or another process is packing it now. Returns the
// bytes freed.
uint64_t RemoveExpertStore(const std::string& path);

// Removes `path`.partial.PID.N files whose PID no longer runs (a packer killed midway), so
// they do not fill the disk; returns how many.
int RemoveStalePartials(const std::string& path);

}  // namespace moex

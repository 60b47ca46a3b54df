#include "cli/auto_budget.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace moex::cli {

namespace {

// A number from a cgroup file; -1 for "max", a missing or unreadable file.
int64_t ReadCgroupValue(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return std::stoll(text);
  } catch (...) {
    return -1;
  }
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(text, sizeof text, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  else
    std::snprintf(text, sizeof text, "%.0f MiB", b / (1024.0 * 1024));
  return text;
}

AutoBudget ComputeAutoBudget(int64_t available, int64_t dense, int64_t kv, int64_t experts) {
  AutoBudget a;
  a.available = available;
  a.dense = dense;
  a.kv = kv;
  a.experts = experts;
  a.margin = std::max<int64_t>(int64_t{512} << 20, available / 10);
  a.budget = std::max<int64_t>(0, available - dense - kv - a.margin);
  a.fits = experts <= a.budget;
  return a;
}

std::string AutoBudget::Describe() const {
  return FormatBytes(budget) + " for experts (of " + FormatBytes(available) +
         " available: dense weights " + FormatBytes(dense) + ", KV cache " + FormatBytes(kv) +
         ", margin " + FormatBytes(margin) + "; all experts take " + FormatBytes(experts) + ")";
}

int64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  Check(static_cast<bool>(meminfo), "cannot read /proc/meminfo to size --host-budget auto: "
                                    "give a budget in bytes (e.g. --host-budget 8GiB)");
  int64_t available = -1;
  std::string line;
  while (std::getline(meminfo, line)) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream fields(line.substr(13));
    int64_t kib = 0;
    if (fields >> kib) available = kib * 1024;
  }
  Check(available >= 0, "/proc/meminfo has no MemAvailable line: give --host-budget in bytes");
  // Inside a container the cgroup's limit is what counts.
  const int64_t limit = ReadCgroupValue("/sys/fs/cgroup/memory.max");
  const int64_t used = ReadCgroupValue("/sys/fs/cgroup/memory.current");
  if (limit > 0 && used >= 0) available = std::min(available, std::max<int64_t>(0, limit - used));
  // MOEX_MEMORY_LIMIT (bytes): run as if the machine had no more, e.g. to leave room for
  // other programs or to try a model's offloaded configuration on a bigger machine.
  if (const char* cap = std::getenv("MOEX_MEMORY_LIMIT"); cap != nullptr && *cap) {
    char* end = nullptr;
    const long long bytes = std::strtoll(cap, &end, 10);
    Check(end != cap && *end == '\0' && bytes > 0, "MOEX_MEMORY_LIMIT must be a byte count, not '",
          cap, "'");
    available = std::min<int64_t>(available, bytes);
  }
  return available;
}

int64_t ModelFileBytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int64_t total = 0;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".safetensors")
        total += static_cast<int64_t>(e.file_size(ec));
    return total;
  }
  // A split GGUF's parts share the name up to "-0000k-of-0000N.gguf".
  const std::string name = fs::path(path).filename().string();
  const size_t of = name.rfind("-of-");
  if (of != std::string::npos && of >= 6 && name.ends_with(".gguf")) {
    const std::string stem = name.substr(0, of - 6);
    const std::string tail = name.substr(of);
    for (const auto& e : fs::directory_iterator(fs::absolute(path, ec).parent_path(), ec)) {
      const std::string other = e.path().filename().string();
      if (other.size() == name.size() && other.starts_with(stem) && other.ends_with(tail))
        total += static_cast<int64_t>(e.file_size(ec));
    }
    if (total > 0) return total;
  }
  return static_cast<int64_t>(fs::file_size(path, ec));
}

}  // namespace moex::cli

// --host-budget auto: the RAM the expert cache may take, from the memory available and what
// else the run holds (the dense weights, the KV cache of a full context, a margin), and the
// default when a model does not fit in memory whole.
#pragma once

#include <cstdint>
#include <string>

namespace moex::cli {

struct AutoBudget {
  int64_t available = 0;  // MemAvailable (or the cgroup's room, if smaller).
  int64_t dense = 0;      // Everything but the routed experts, resident.
  int64_t kv = 0;         // KV cache of the context, for every sequence at once.
  int64_t margin = 0;     // For the OS and the rest of the process: 10 %, at least 512 MiB.
  int64_t experts = 0;    // Every routed expert.
  int64_t budget = 0;     // available - dense - kv - margin (0 when negative).
  bool fits = false;      // Every expert fits in the budget: no offloading needed.

  // "6.1 GiB for experts (of 9.8 GiB available: dense 1.2 GiB, KV cache 0.5 GiB, margin
  // 1.0 GiB)".
  std::string Describe() const;
};

// The arithmetic alone (unit-tested with hand-computed cases).
AutoBudget ComputeAutoBudget(int64_t available, int64_t dense, int64_t kv, int64_t experts);

// MemAvailable from /proc/meminfo, capped by a cgroup v2 limit (memory.max - memory.current)
// when the process runs under one and by MOEX_MEMORY_LIMIT (bytes) when set; throws Error
// when /proc/meminfo cannot be read or MOEX_MEMORY_LIMIT is not a byte count.
int64_t AvailableMemoryBytes();

// Bytes of a model's weight files: a GGUF (with the other parts of a split one) or an HF
// directory's .safetensors files.
int64_t ModelFileBytes(const std::string& path);

// "1.5 GiB", "512 MiB".
std::string FormatBytes(int64_t bytes);

}  // namespace moex::cli

// What offloading did, per MoE layer and in total, for `generate --json` and `bench --json`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tiers/offload_controller.h"

namespace moex::tiers {

// The counters of one layer (or the total) as JSON: hits, misses, streamed, prefetch_*,
// evictions. Shared by the engine's metrics and the simulator's results.
nlohmann::json CountersJson(const LayerCounters& c, int64_t page_bytes);
// Policy CPU time: on the forward pass (hooks) and on its worker, per pass.
nlohmann::json PolicyTimingJson(const PolicyTiming& t);

struct LayerOffloadMetrics {
  int layer = 0;
  LayerCounters counters;
  uint64_t bytes_read = 0;
  double stall_ms = 0;  // Time the compute waited for this layer's chunks.
};

struct OffloadMetrics {
  std::string policy;
  std::string policy_worker;  // sync or async.
  PolicyTiming policy_timing;
  nlohmann::json predictions;  // PredictionMetrics::ToJson.
  bool direct_io = false;
  int64_t budget_bytes = 0;
  int64_t capacity_bytes = 0;    // Pages that fit the budget.
  int64_t host_cache_bytes = 0;  // Pages in use now.
  int64_t peak_host_cache_bytes = 0;
  int64_t staging_bytes = 0;  // Fixed overhead for experts streamed past the cache.
  int64_t page_bytes = 0;
  int chunk_neurons = 0;
  std::vector<LayerOffloadMetrics> layers;  // MoE layers only.
  LayerOffloadMetrics total;
  uint64_t reads = 0;
  double io_busy_ms = 0;  // Wall time with at least one read in flight.
  double overlap_ms = 0;  // io_busy_ms minus the stall: I/O hidden behind compute.

  double hit_rate() const;
  // Keys: hits, misses, hit_rate, bytes_read, stall_ms, prefetch_issued, prefetch_used,
  // prefetch_wasted, prefetch_cancelled, ... plus "layers": [...] with the same per-layer.
  nlohmann::json ToJson() const;
};

}  // namespace moex::tiers

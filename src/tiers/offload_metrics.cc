#include "tiers/offload_metrics.h"

#include <nlohmann/json.hpp>

namespace moex::tiers {

namespace {

nlohmann::json LayerJson(const LayerOffloadMetrics& m) {
  const LayerCounters& c = m.counters;
  const int64_t demand = c.hits + c.misses;
  nlohmann::json j = CountersJson(c);
  j["hit_rate"] = demand ? static_cast<double>(c.hits) / demand : 0.0;
  j["bytes_read"] = m.bytes_read;
  j["stall_ms"] = m.stall_ms;
  return j;
}

}  // namespace

nlohmann::json CountersJson(const LayerCounters& c) {
  return {{"hits", c.hits},
          {"misses", c.misses},
          {"streamed", c.streamed},
          {"prefetch_issued", c.prefetch_issued},
          {"prefetch_used", c.prefetch_used},
          {"prefetch_wasted", c.prefetch_wasted},
          {"prefetch_cancelled", c.prefetch_cancelled},
          {"prefetch_dropped", c.prefetch_dropped},
          {"evictions", c.evictions}};
}

double OffloadMetrics::hit_rate() const {
  const int64_t demand = total.counters.hits + total.counters.misses;
  return demand ? static_cast<double>(total.counters.hits) / demand : 0.0;
}

nlohmann::json OffloadMetrics::ToJson() const {
  nlohmann::json j = LayerJson(total);
  j["policy"] = policy;
  j["direct_io"] = direct_io;
  j["budget_bytes"] = budget_bytes;
  j["capacity_bytes"] = capacity_bytes;
  j["host_cache_bytes"] = host_cache_bytes;
  j["peak_host_cache_bytes"] = peak_host_cache_bytes;
  j["staging_bytes"] = staging_bytes;
  j["page_bytes"] = page_bytes;
  j["chunk_neurons"] = chunk_neurons;
  j["reads"] = reads;
  j["io_busy_ms"] = io_busy_ms;
  j["overlap_ms"] = overlap_ms;
  nlohmann::json per_layer = nlohmann::json::array();
  for (const auto& l : layers) {
    nlohmann::json lj = LayerJson(l);
    lj["layer"] = l.layer;
    per_layer.push_back(lj);
  }
  j["layers"] = per_layer;
  return j;
}

}  // namespace moex::tiers

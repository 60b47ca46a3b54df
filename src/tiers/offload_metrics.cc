#include "tiers/offload_metrics.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace moex::tiers {

namespace {

nlohmann::json LayerJson(const LayerOffloadMetrics& m, int64_t page_bytes) {
  const LayerCounters& c = m.counters;
  const int64_t demand = c.hits + c.misses;
  nlohmann::json j = CountersJson(c, page_bytes);
  j["hit_rate"] = demand ? static_cast<double>(c.hits) / demand : 0.0;
  j["bytes_read"] = m.bytes_read;
  j["stall_ms"] = m.stall_ms;
  return j;
}

}  // namespace

nlohmann::json CountersJson(const LayerCounters& c, int64_t page_bytes) {
  return {{"hits", c.hits},
          {"misses", c.misses},
          {"partial_hits", c.partial_hits},
          {"streamed", c.streamed},
          {"bypassed", c.bypassed},
          {"chunks_streamed", c.chunks_streamed},
          {"prefetch_issued", c.prefetch_issued},
          {"prefetch_used", c.prefetch_used},
          {"prefetch_late", c.prefetch_late},
          {"prefetch_wasted", c.prefetch_wasted},
          {"prefetch_wasted_bytes", c.prefetch_wasted_chunks * page_bytes},
          {"prefetch_cancelled", c.prefetch_cancelled},
          {"prefetch_dropped", c.prefetch_dropped},
          {"prefetch_foreign", c.prefetch_foreign},
          {"evictions", c.evictions}};
}

nlohmann::json PolicyTimingJson(const PolicyTiming& t) {
  const double passes = static_cast<double>(std::max<int64_t>(t.passes, 1));
  return {{"hook_us", t.hook_us},
          {"worker_us", t.worker_us},
          {"worker_jobs", t.worker_jobs},
          {"passes", t.passes},
          // Inline jobs are inside hook_us already; a worker thread's are not.
          {"cpu_us_per_pass", (t.hook_us + (t.jobs_inline ? 0 : t.worker_us)) / passes},
          {"hook_us_per_pass", t.hook_us / passes},
          {"budget_refused", t.budget_refused},
          {"evict_us", t.evict_us},
          {"evict_us_per_pass", t.evict_us / passes}};
}

double OffloadMetrics::hit_rate() const {
  const int64_t demand = total.counters.hits + total.counters.misses;
  return demand ? static_cast<double>(total.counters.hits) / demand : 0.0;
}

nlohmann::json OffloadMetrics::ToJson() const {
  nlohmann::json j = LayerJson(total, page_bytes);
  j["policy"] = policy;
  j["policy_worker"] = policy_worker;
  j["policy_cpu"] = PolicyTimingJson(policy_timing);
  j["predictions"] = predictions;
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
    nlohmann::json lj = LayerJson(l, page_bytes);
    lj["layer"] = l.layer;
    per_layer.push_back(lj);
  }
  j["layers"] = per_layer;
  return j;
}

}  // namespace moex::tiers

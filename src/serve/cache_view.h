// The picture of the expert cache that the web page draws (GET /moex/cache): per MoE layer,
// the demand hits and misses so far, how often the router picked each expert, and the
// share of each expert held in host memory, with the cache's totals. Counters are
// cumulative; the page differences successive views for rates over time.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "serve/expert_activity.h"

namespace moex::serve {

// `offload` is MoeExecutor::MetricsJson (per-layer counters under "layers" when experts are
// offloaded; without them every access is a hit), `resident` is MoeExecutor::ResidentShare.
// Keys: offloaded, policy, num_experts, hits, misses, hit_rate, budget_bytes,
// resident_bytes, layers: [{layer, hits, misses, activations[E], resident[E]}].
nlohmann::json CacheViewJson(const nlohmann::json& offload, const ExpertActivity& activity,
                             const std::vector<std::vector<float>>& resident);

}  // namespace moex::serve

#include "serve/cache_view.h"

#include <cmath>

namespace moex::serve {

namespace {

using nlohmann::json;

int64_t Count(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : 0;
}

}  // namespace

json CacheViewJson(const json& offload, const ExpertActivity& activity,
                   const std::vector<std::vector<float>>& resident) {
  const bool offloaded = offload.is_object() && offload.contains("layers");
  json layers = json::array();
  int64_t hits = 0, misses = 0;
  for (int l = 0; l < activity.num_layers(); ++l) {
    if (static_cast<size_t>(l) >= resident.size() || resident[static_cast<size_t>(l)].empty())
      continue;  // Not a MoE layer.
    json layer = {{"layer", l}, {"hits", activity.accesses(l)}, {"misses", 0}};
    if (offloaded) {
      layer["hits"] = 0;
      for (const json& counters : offload["layers"])
        if (Count(counters, "layer") == l) {
          layer["hits"] = Count(counters, "hits");
          layer["misses"] = Count(counters, "misses");
        }
    }
    hits += layer["hits"].get<int64_t>();
    misses += layer["misses"].get<int64_t>();
    json activations = json::array(), share = json::array();
    for (int e = 0; e < activity.num_experts(); ++e)
      activations.push_back(activity.activations(l, e));
    // Three decimals are all a colour can show, and keep the view small.
    for (float s : resident[static_cast<size_t>(l)])
      share.push_back(std::round(s * 1000.0) / 1000.0);
    layer["activations"] = std::move(activations);
    layer["resident"] = std::move(share);
    layers.push_back(std::move(layer));
  }
  json view = {{"offloaded", offloaded},
               {"policy", offloaded ? offload.value("policy", "") : std::string("resident")},
               {"num_experts", activity.num_experts()},
               {"hits", hits},
               {"misses", misses},
               {"hit_rate", hits + misses > 0 ? static_cast<double>(hits) / (hits + misses) : 0.0},
               {"layers", std::move(layers)}};
  if (offloaded) {
    view["budget_bytes"] = Count(offload, "budget_bytes");
    view["resident_bytes"] = Count(offload, "host_cache_bytes");
  }
  return view;
}

}  // namespace moex::serve

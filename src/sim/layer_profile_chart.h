// Per-layer values a policy reports about itself (`policy_report`), drawn as SVG bar
// charts for the sweep's HTML page: e.g. MoEpic's cache budget and split ratio per layer.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace moex::sim {

struct LayerProfile {
  std::string title;  // e.g. "moepic at 25 %: budget_experts"
  std::vector<int> layers;
  std::vector<double> values;
};

// The profiles a policy report asks to be drawn: every object in it with a "layers"
// array and a "charts" list names the per-layer fields to draw. `label` heads each title.
std::vector<LayerProfile> LayerProfilesOf(const nlohmann::json& policy_report,
                                          const std::string& label);

// A <h2> section with one bar chart per profile (empty string for none). Throws Error when
// a profile's layers and values differ in length or a value is not finite.
std::string RenderLayerProfiles(const std::vector<LayerProfile>& profiles);

}  // namespace moex::sim

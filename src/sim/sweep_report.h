// The report of a policy sweep (`moex sim` over cache budgets x policies): one
// self-contained HTML page with SVG line charts and a table of every point.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/layer_profile_chart.h"

namespace moex::sim {

// One simulated run: one policy at one cache budget.
struct SweepPoint {
  std::string policy;          // e.g. "lru", "nextgate+lfu", "belady"
  double budget_fraction = 0;  // share of all expert bytes, 0..1 (x axis, shown as %)
  int64_t budget_bytes = 0;
  double hit_rate = 0;         // 0..1
  double bytes_per_token = 0;  // bytes read from the slow tier per token
  double tpot_ms = 0;          // modelled time per output token
  double ttft_ms = 0;          // modelled time to first token
};

struct SweepReport {
  std::string title;     // e.g. "Policy sweep"
  std::string trace;     // trace file name and short description
  std::string model;     // model the trace came from (and the model its expert sizes were
                         // scaled to, if any)
  std::string hardware;  // hardware profile name and description
  std::vector<SweepPoint> points;
  std::vector<LayerProfile> layer_profiles;  // Per-layer policy configuration (bar charts).
};

// A complete, self-contained HTML document (no scripts or external resources): a header
// naming trace, model and hardware; three SVG line charts (hit rate, bytes per token and
// modelled TPOT against the budget), one line per policy with markers, a legend, axes from 0
// with 1-2-5 tick steps, and a table of all points. Policies keep the order in which they
// first appear; "belady" is drawn as a dashed black line labelled as the optimal bound.
// Throws moex::Error when the report has no points, a policy name is empty, or a value is not
// finite, is negative, or (hit rate) is above 1.
std::string RenderSweepHtml(const SweepReport& report);

// How every such page begins: `moex sim --html` replaces a file that starts so.
inline constexpr char kSweepHtmlStart[] = "<!DOCTYPE html>\n<!-- moex sim sweep -->\n";

}  // namespace moex::sim

// How many tokens a routing trace routed to each expert: what the balanced expert placement
// of expert parallelism spreads over the ranks (dist/expert_placement.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moex::trace {

// [num_layers][num_experts] of the trace's model: per MoE layer and expert, the (token,
// top-k slot) pairs routed to it over the whole trace; empty rows for the other layers.
// Throws Error for a file that is not a readable routing trace.
std::vector<std::vector<int64_t>> RoutedTokenCounts(const std::string& trace_path);

}  // namespace moex::trace

// How many tokens a routing trace routed to each expert: what the balanced expert placement
// of expert parallelism spreads over the ranks (dist/expert_placement.h).
#pragma once

#include <cstdint>
#include <vector>

#include "trace/trace_reader.h"

namespace moex::trace {

// [num_layers][num_experts] of the trace's model: per MoE layer and expert, the (token,
// top-k slot) pairs routed to it over the whole trace; empty rows for the other layers.
// Rewinds the reader before and after. Throws Error for a gate the trace's model cannot have.
std::vector<std::vector<int64_t>> RoutedTokenCounts(TraceReader& reader);

}  // namespace moex::trace

#include "trace/routing_counts.h"

#include "core/error.h"

namespace moex::trace {

std::vector<std::vector<int64_t>> RoutedTokenCounts(TraceReader& reader) {
  const TraceModel& m = reader.header().model;
  const std::string& trace_path = reader.path();
  reader.Rewind();
  std::vector<std::vector<int64_t>> counts(static_cast<size_t>(m.num_layers));
  for (int layer : m.moe_layers)
    counts[static_cast<size_t>(layer)].assign(static_cast<size_t>(m.num_experts), 0);
  TraceEvent event;
  while (reader.Next(&event)) {
    if (event.kind != TraceEvent::kIteration) continue;
    for (const TraceGate& gate : event.iteration.gates) {
      Check(gate.layer >= 0 && gate.layer < m.num_layers &&
                !counts[static_cast<size_t>(gate.layer)].empty(),
            trace_path, ": a gate of layer ", gate.layer, ", which is not a MoE layer");
      std::vector<int64_t>& row = counts[static_cast<size_t>(gate.layer)];
      for (int32_t e : gate.ids) {
        Check(e >= 0 && e < m.num_experts, trace_path, ": expert ", e, " of layer ", gate.layer,
              " is out of range");
        ++row[static_cast<size_t>(e)];
      }
    }
  }
  reader.Rewind();
  return counts;
}

}  // namespace moex::trace

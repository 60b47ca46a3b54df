// A recorded trace's records as the policy events the engine emitted when it was recorded:
// the one conversion, shared by the simulator's replay and by learning from traces. The
// events point into the records (and a gate's routed set into `routed`), which must outlive
// them.
#pragma once

#include <vector>

#include "policy/events.h"
#include "trace/trace_format.h"

namespace moex::trace {

policy::RequestBeginEvent RequestBeginEventOf(const TraceEvent& e);
policy::IterationBeginEvent IterationBeginEventOf(const TraceIteration& it, const TraceHeader& h);
policy::GateEvent GateEventOf(const TraceGate& g, const TraceHeader& h,
                              std::vector<int32_t>* routed);

}  // namespace moex::trace

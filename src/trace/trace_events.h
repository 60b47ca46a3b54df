// A recorded trace's records as the policy events the engine emitted when it was recorded:
// the one conversion, shared by the simulator's replay and by learning from traces. The
// events point into the records, which must outlive them.
#pragma once

#include "policy/events.h"
#include "trace/trace_format.h"

namespace moex::trace {

policy::RequestBeginEvent RequestBeginEventOf(const TraceEvent& e);
policy::IterationBeginEvent IterationBeginEventOf(const TraceIteration& it, const TraceHeader& h);
policy::GateEvent GateEventOf(const TraceGate& g, const TraceHeader& h);

}  // namespace moex::trace

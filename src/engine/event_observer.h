// Listens to the policy event stream as the engine emits it (docs/design.md, "The event stream"):
// the trace recorder and statistics use it. The MoE executor receives the same events
// through its own hooks; observers see each event before the executor acts on it.
#pragma once

#include "policy/events.h"

namespace moex {

class EventObserver {
 public:
  virtual ~EventObserver() = default;
  virtual void OnRequestBegin(const policy::RequestBeginEvent& e) {}
  virtual void OnIterationBegin(const policy::IterationBeginEvent& e) {}
  virtual void OnGate(const policy::GateEvent& e) {}
  virtual void OnIterationEnd() {}
  virtual void OnRequestEnd(const policy::RequestEndEvent& e) {}
};

}  // namespace moex

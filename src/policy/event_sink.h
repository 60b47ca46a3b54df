// The one listener interface of the event stream (docs/design.md, "The event stream"). The
// engine's Transformer emits every event once, to an EventFanOut; the offload stack (the host
// tier, which feeds its OffloadController) and the observers (trace recorder, statistics,
// the server's activity view) are its sinks. A Policy answers the same events with Decisions
// (policy.h); a sink only listens.
#pragma once

#include <algorithm>
#include <vector>

#include "policy/events.h"

namespace moex::policy {

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void OnRequestBegin(const RequestBeginEvent& e) {}
  virtual void OnIterationBegin(const IterationBeginEvent& e) {}
  virtual void OnGate(const GateEvent& e) {}
  virtual void OnExpertDone(const ExpertDoneEvent& e) {}
  virtual void OnIterationEnd() {}
  virtual void OnRequestEnd(const RequestEndEvent& e) {}
};

// Forwards each event to its sinks in the order they were added. A sink that throws stops
// the event there (the ones after it do not see it); the emitter's error path still emits
// iteration_end to all of them.
class EventFanOut final : public EventSink {
 public:
  // REQUIRES: `sink` outlives its membership (Remove it before it goes).
  void Add(EventSink* sink) { sinks_.push_back(sink); }
  void Remove(EventSink* sink) { std::erase(sinks_, sink); }
  bool empty() const { return sinks_.empty(); }

  void OnRequestBegin(const RequestBeginEvent& e) override {
    for (EventSink* s : sinks_) s->OnRequestBegin(e);
  }
  void OnIterationBegin(const IterationBeginEvent& e) override {
    for (EventSink* s : sinks_) s->OnIterationBegin(e);
  }
  void OnGate(const GateEvent& e) override {
    for (EventSink* s : sinks_) s->OnGate(e);
  }
  void OnExpertDone(const ExpertDoneEvent& e) override {
    for (EventSink* s : sinks_) s->OnExpertDone(e);
  }
  void OnIterationEnd() override {
    for (EventSink* s : sinks_) s->OnIterationEnd();
  }
  void OnRequestEnd(const RequestEndEvent& e) override {
    for (EventSink* s : sinks_) s->OnRequestEnd(e);
  }

 private:
  std::vector<EventSink*> sinks_;
};

// Token regrouping between passes (Policy::RegroupPasses, ExpertFlow §3.3): the narrow handle
// the server's scheduler holds, with nothing else of the engine behind it.
class PassRegrouper {
 public:
  virtual ~PassRegrouper() = default;
  virtual bool RegroupPasses(const std::vector<PassCandidate>& candidates, int groups,
                             std::vector<int>* group) = 0;
};

}  // namespace moex::policy

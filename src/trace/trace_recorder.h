// Records the engine's event stream into a trace: add it to a Transformer's sinks and every
// request, iteration and gate is written as it happens.
#pragma once

#include <string>

#include "model/model.h"
#include "policy/event_sink.h"
#include "trace/trace_writer.h"

namespace moex::trace {

// The trace's description of a loaded model (shape, expert geometry, config).
TraceModel TraceModelOf(const Model& model);

class TraceRecorder : public policy::EventSink {
 public:
  // With header.router_weights, the model's router tensors are written first.
  TraceRecorder(TraceWriter& writer, const Model& model);

  void OnRequestBegin(const policy::RequestBeginEvent& e) override;
  void OnIterationBegin(const policy::IterationBeginEvent& e) override;
  void OnGate(const policy::GateEvent& e) override;
  void OnIterationEnd() override;
  void OnRequestEnd(const policy::RequestEndEvent& e) override;

  int64_t iterations() const { return iterations_; }
  int64_t tokens() const { return tokens_; }

 private:
  TraceWriter& writer_;
  TraceEvent pending_;  // The iteration being recorded.
  bool in_iteration_ = false;
  int64_t iterations_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace moex::trace

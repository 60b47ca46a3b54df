// The policy event stream between ranks (docs/expert-parallel.md, "Offloading on every
// rank"). Rank 0 runs the forward pass, so it alone sees the events; a worker whose experts
// are offloaded needs them for its own policy. Rank 0 appends each event to a batch per
// worker and sends the batch ahead of the worker's next layer message; the worker replays it
// into its offload stack in the same order. expert_done is not sent: each rank emits its own
// as it computes its experts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "policy/event_sink.h"
#include "policy/events.h"

namespace moex::dist {

// Which optional event fields travel (policy::TraceNeed bits: kNeedsProbs, kNeedsHidden,
// kNeedsPooled). Ids, weights and token ids always do.
class EventBatch {
 public:
  explicit EventBatch(unsigned fields = 0) : fields_(fields) {}

  void Add(const policy::RequestBeginEvent& e);
  void Add(const policy::IterationBeginEvent& e);
  void Add(const policy::GateEvent& e);  // Its routed set is not sent: the reader derives it.
  void AddIterationEnd();
  void Add(const policy::RequestEndEvent& e);

  bool empty() const { return events_ == 0; }
  int64_t events() const { return events_; }
  // The encoded batch; the batch is empty afterwards.
  std::string Take();

 private:
  template <typename T>
  void Put(const T& v);
  template <typename T>
  void PutArray(const T* data, int64_t n);

  unsigned fields_;
  std::string bytes_;
  int64_t events_ = 0;
};

// Decodes a batch and emits its events to `sink` in order, each gate with its routed set
// (policy::SetRouted). Returns the number of events. Throws Error naming what is wrong (a
// count larger than the bytes carry, an unknown event, trailing bytes) before emitting the
// event it is in; the events before it have been emitted.
int64_t ReplayEvents(std::span<const std::byte> batch, policy::EventSink& sink);

}  // namespace moex::dist

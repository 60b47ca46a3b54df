#include "trace/trace_events.h"

namespace moex::trace {

policy::RequestBeginEvent RequestBeginEventOf(const TraceEvent& e) {
  return {e.request, e.prompt.data(), static_cast<int64_t>(e.prompt.size())};
}

policy::IterationBeginEvent IterationBeginEventOf(const TraceIteration& it, const TraceHeader& h) {
  policy::IterationBeginEvent e;
  e.iteration = it.iteration;
  e.n_requests = static_cast<int64_t>(it.requests.size());
  e.requests = it.requests.data();
  e.token_counts = it.token_counts.data();
  e.tokens = it.tokens.data();
  e.n_tokens = static_cast<int64_t>(it.tokens.size());
  e.pooled = it.pooled.empty() ? nullptr : it.pooled.data();
  e.d = h.model.hidden_size;
  return e;
}

policy::GateEvent GateEventOf(const TraceGate& g, const TraceHeader& h,
                              std::vector<int32_t>* routed) {
  policy::GateEvent e;
  e.layer = g.layer;
  e.n_tokens = g.n_tokens;
  e.top_k = g.top_k;
  e.num_experts = h.model.num_experts;
  e.ids = g.ids.data();
  e.weights = g.weights.data();
  e.probs = g.probs.empty() ? nullptr : g.probs.data();
  e.hidden = g.hidden.empty() ? nullptr : g.hidden.data();
  e.d = h.model.hidden_size;
  policy::SetRouted(&e, routed);
  return e;
}

}  // namespace moex::trace

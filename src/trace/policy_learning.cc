#include "trace/policy_learning.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"
#include "policy/policy_worker.h"
#include "trace/trace_events.h"
#include "trace/trace_reader.h"

namespace moex::trace {

namespace {

void CheckTopology(const TraceReader& reader, const policy::PolicyFacts& f) {
  const TraceModel& m = reader.header().model;
  std::vector<int> moe;
  for (int l = 0; l < f.num_layers; ++l)
    if (f.IsMoeLayer(l)) moe.push_back(l);
  Check(m.num_layers == f.num_layers && m.moe_layers == moe && m.num_experts == f.num_experts &&
            m.top_k == f.top_k && m.hidden_size == f.hidden_size,
        "--learn-from ", reader.path(), ": the trace's model (", m.num_layers, " layers, ",
        m.moe_layers.size(), " MoE layers of ", m.num_experts, " experts, top-", m.top_k,
        ", hidden ", m.hidden_size, ") is not the one being served (", f.num_layers, " layers, ",
        moe.size(), " MoE layers of ", f.num_experts, " experts, top-", f.top_k, ", hidden ",
        f.hidden_size, ")");
}

}  // namespace

LearningSummary LearnFromTraces(policy::Policy& policy, const policy::PolicyFacts& facts,
                                const std::vector<std::string>& paths) {
  LearningSummary summary;
  if (paths.empty()) return summary;
  Stopwatch watch;
  policy::Decisions discard;
  std::vector<int32_t> routed;  // A gate event's routed set.
  policy.OnLearnBegin();
  for (const std::string& path : paths) {
    TraceReader reader(path);
    CheckTopology(reader, facts);
    ++summary.traces;
    const TraceHeader& h = reader.header();
    TraceEvent e;
    while (reader.Next(&e)) {
      switch (e.kind) {
        case TraceEvent::kRequestBegin:
          ++summary.requests;
          policy.OnRequestBegin(RequestBeginEventOf(e), &discard);
          break;
        case TraceEvent::kIteration: {
          const TraceIteration& it = e.iteration;
          ++summary.iterations;
          policy.OnIterationBegin(IterationBeginEventOf(it, h), &discard);
          for (const TraceGate& g : it.gates) {
            ++summary.gates;
            const policy::GateEvent gate = GateEventOf(g, h, &routed);
            policy.OnGate(gate, &discard);
            // The engine finishes a layer's experts in its own order; ascending here.
            for (int32_t id : gate.routed_experts()) policy.OnExpertDone({g.layer, id}, &discard);
          }
          policy.OnIterationEnd(&discard);
          break;
        }
        case TraceEvent::kRequestEnd:
          policy.OnRequestEnd({e.request}, &discard);
          break;
      }
      discard.Clear();
    }
  }
  policy.OnLearnEnd();
  if (facts.worker != nullptr) {  // What the worker learned belongs to the policy now.
    facts.worker->Flush(&discard);
  }
  summary.ms = watch.ElapsedMs();
  return summary;
}

}  // namespace moex::trace

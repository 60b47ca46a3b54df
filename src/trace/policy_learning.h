// --learn-from: a policy learns from recorded traces before it serves. The trace's events
// are replayed into the policy, with no cache behind them, between OnLearnBegin and
// OnLearnEnd (decisions are discarded; worker jobs are waited for and their results
// applied to the policy). The same replay serves every policy: an EAM collection, an
// expert-map store or a predictor's training set are all built from these events.
#pragma once

#include <string>
#include <vector>

#include "policy/policy.h"

namespace moex::trace {

struct LearningSummary {
  int64_t traces = 0, requests = 0, iterations = 0, gates = 0;
  double ms = 0;
};

// Throws Error naming the trace when its topology (layers, MoE layers, experts, top-k,
// hidden size) is not the facts'.
LearningSummary LearnFromTraces(policy::Policy& policy, const policy::PolicyFacts& facts,
                                const std::vector<std::string>& paths);

}  // namespace moex::trace

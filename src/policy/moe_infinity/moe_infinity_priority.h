// MoE-Infinity's two priorities, as pure functions of EAMs.
//
// Prefetch priority (§5.1, Fig. 7): the matched EAMs are summed (step 2), each row is
// normalised into activation probabilities, and a cell of a future layer i, seen from the
// current layer l, is multiplied by the layer proximity factor 1 - (i - l)/L (step 3), so a
// nearer expert can go before a likelier but farther one (Fig. 6: E[3,2] before E[4,2]).
//
// Cache priority (§5.2): an expert's count in the request-level EAM, raised for the initial
// layers, whose experts prefetching serves worst. The paper gives no formula for the raise;
// moex multiplies by 1 + boost * (1 - i/L), the same linear shape as the proximity factor:
// layer 0 weighs 1 + boost, the last layer 1 + boost/L.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "policy/moe_infinity/expert_activation_matrix.h"

namespace moex::policy {

struct PrefetchCandidate {
  int layer = 0;  // MoE ordinal (EAM row).
  int expert = 0;
  double priority = 0;
};

// Candidates of the layers after `current` (all of them, or the next `lookahead` when > 0)
// with a nonzero probability, highest priority first; ties: nearer layer, then lower id.
// Rows that sum to zero predict nothing. `proximity` false leaves the probabilities as they are.
// Only the first `ranked` candidates are put in order (the top K); the rest follow unordered.
std::vector<PrefetchCandidate> PrefetchPriorities(const ExpertActivationMatrix& aggregate,
                                                  int current, int lookahead, bool proximity,
                                                  size_t ranked = SIZE_MAX);
// Puts the first `ranked` candidates in that order.
void RankCandidates(std::vector<PrefetchCandidate>* candidates, size_t ranked);

// count * (1 + boost * (1 - layer/layers)).
double CachePriority(double count, int layer, int layers, double boost);

}  // namespace moex::policy

#include "policy/moe_infinity/moe_infinity_priority.h"

#include <algorithm>

namespace moex::policy {

void RankCandidates(std::vector<PrefetchCandidate>* candidates, size_t ranked) {
  const auto before = [](const PrefetchCandidate& a, const PrefetchCandidate& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.layer != b.layer) return a.layer < b.layer;
    return a.expert < b.expert;
  };
  const size_t n = std::min(ranked, candidates->size());
  std::partial_sort(candidates->begin(), candidates->begin() + static_cast<std::ptrdiff_t>(n),
                    candidates->end(), before);
}

std::vector<PrefetchCandidate> PrefetchPriorities(const ExpertActivationMatrix& aggregate,
                                                  int current, int lookahead, bool proximity,
                                                  size_t ranked) {
  std::vector<PrefetchCandidate> out;
  const int layers = aggregate.layers();
  const int last = lookahead > 0 ? std::min(layers - 1, current + lookahead) : layers - 1;
  for (int i = std::max(current + 1, 0); i <= last; ++i) {
    const double sum = aggregate.RowSum(i);
    if (sum <= 0) continue;
    const double factor =
        proximity ? 1.0 - static_cast<double>(i - current) / static_cast<double>(layers) : 1.0;
    for (int j = 0; j < aggregate.experts(); ++j)
      if (const float c = aggregate.at(i, j); c > 0) out.push_back({i, j, c / sum * factor});
  }
  RankCandidates(&out, ranked);
  return out;
}

double CachePriority(double count, int layer, int layers, double boost) {
  const double weight =
      1.0 + boost * (1.0 - static_cast<double>(layer) / static_cast<double>(std::max(layers, 1)));
  return count * weight;
}

}  // namespace moex::policy

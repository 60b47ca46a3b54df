#include "policy/fmoe/fmoe_selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace moex::policy::fmoe {

double SelectionThreshold(double score) {
  if (std::isnan(score)) score = 0;
  return std::max(0.0, std::min(1.0 - score, 1.0));
}

std::vector<int32_t> SelectExperts(const float* probs, int num_experts, double delta, int k) {
  Check(num_experts >= 0 && k >= 0, "fmoe: selection over ", num_experts, " experts, top-", k);
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  std::vector<int32_t> chosen;
  double sum = 0;
  for (int32_t j : order) {
    if (static_cast<int>(chosen.size()) >= k && sum >= delta) break;
    chosen.push_back(j);
    sum += probs[j];
  }
  return chosen;
}

double PrefetchPriority(double p, int distance) {
  Check(distance >= 1, "fmoe: prefetch priority at layer distance ", distance);
  return p / distance;
}

double EvictionScore(double p, int64_t freq) {
  return p * static_cast<double>(freq);
}

}  // namespace moex::policy::fmoe

#include "model/grouped_gate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"

namespace moex {

GroupedGate GroupedGate::Of(const ModelConfig& config) {
  GroupedGate g;
  g.num_experts = config.num_experts;
  g.top_k = config.num_experts_per_tok;
  g.scoring = config.scoring_func;
  g.method = config.topk_method;
  g.n_group = config.n_group;
  g.topk_group = config.topk_group;
  return g;
}

void GroupedGate::Score(float* s) const {
  if (scoring == ScoringFunc::kSigmoid) {
    for (int e = 0; e < num_experts; ++e) s[e] = 1.0f / (1.0f + std::exp(-s[e]));
  } else {
    kernels::Softmax(s, num_experts);
  }
}

void GroupedGate::Choice(const float* s, const float* bias, float* choice, Scratch* scratch) const {
  const int E = num_experts;
  const bool add_bias = method == TopKMethod::kNoauxTc && bias != nullptr;
  for (int e = 0; e < E; ++e) choice[e] = s[e] + (add_bias ? bias[e] : 0.0f);
  if (method == TopKMethod::kGreedy || n_group <= 1) return;
  const int groups = n_group, per_group = E / groups;
  std::vector<float>& group_score = scratch->group_score;
  std::vector<int32_t>& group_order = scratch->group_order;
  std::vector<char>& keep = scratch->keep;
  group_score.resize(static_cast<size_t>(groups));
  group_order.resize(static_cast<size_t>(groups));
  keep.assign(static_cast<size_t>(groups), 0);
  for (int g = 0; g < groups; ++g) {
    const float* c = &choice[g * per_group];
    float best = c[0], second = -INFINITY;
    for (int i = 1; i < per_group; ++i) {
      if (c[i] > best) {
        second = best;
        best = c[i];
      } else if (c[i] > second) {
        second = c[i];
      }
    }
    group_score[static_cast<size_t>(g)] = method == TopKMethod::kNoauxTc ? best + second : best;
  }
  std::iota(group_order.begin(), group_order.end(), 0);
  const float* gs = group_score.data();
  std::partial_sort(
      group_order.begin(), group_order.begin() + topk_group, group_order.end(),
      [gs](int32_t a, int32_t b) { return gs[a] > gs[b] || (gs[a] == gs[b] && a < b); });
  for (int g = 0; g < topk_group; ++g)
    keep[static_cast<size_t>(group_order[static_cast<size_t>(g)])] = 1;
  for (int e = 0; e < E; ++e)
    if (!keep[static_cast<size_t>(e / per_group)]) choice[e] = 0.0f;
}

void GroupedGate::Pick(const float* c, int32_t* ids, Scratch* scratch) const {
  std::vector<int32_t>& order = scratch->order;
  order.resize(static_cast<size_t>(num_experts));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                    [c](int32_t a, int32_t b) { return c[a] > c[b] || (c[a] == c[b] && a < b); });
  std::copy(order.begin(), order.begin() + top_k, ids);
}

}  // namespace moex

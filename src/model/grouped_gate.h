// The expert choice of DeepSeek-V2/V3's gate (RouterKind::kGroupedTopK; GLM-4.5 uses V3's)
// for one token, as HF's MoEGate makes it in eval mode. The engine's router
// (engine/router.cc) and the policies that predict a later layer's experts from its router
// (policy/common/router_prediction.cc) both choose through this, so a predictor given a
// layer's own gate input picks exactly the experts the engine routes to.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace moex {

struct GroupedGate {
  int num_experts = 0;
  int top_k = 0;
  ScoringFunc scoring = ScoringFunc::kSoftmax;
  TopKMethod method = TopKMethod::kGreedy;
  int n_group = 1;
  int topk_group = 1;

  static GroupedGate Of(const ModelConfig& config);

  // Per-call working memory, reused across tokens.
  struct Scratch {
    std::vector<float> group_score;
    std::vector<int32_t> group_order, order;
    std::vector<char> keep;
  };

  // In place: router logits -> scores s (softmax over the experts, or each one's sigmoid).
  void Score(float* logits) const;
  // choice = s (+ bias under noaux_tc, when `bias` is given); with groups (n_group > 1, not
  // greedy) each group is scored by its best choice (group_limited_greedy) or its two best
  // summed (noaux_tc), and every expert outside the topk_group best groups gets 0 (HF's
  // masked_fill). `choice` holds num_experts values.
  void Choice(const float* scores, const float* bias, float* choice, Scratch* scratch) const;
  // The top_k experts by choice, best first, ties to the lower id.
  void Pick(const float* choice, int32_t* ids, Scratch* scratch) const;
};

}  // namespace moex

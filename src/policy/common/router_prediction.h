// Next-layer gate speculation, shared by `nextgate` and `moepic` (MoEpic §3.2, Eq. 3):
// a layer's gate input is fed to a later MoE layer's router. Residual connections keep
// consecutive layers' hidden states close, so the later router's scores on this layer's
// input predict which experts it will pick. One computation serves both policies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "policy/policy_facts.h"

namespace moex::policy {

struct RouterPrediction {
  // Per expert, the largest score over the tokens that the router chooses by: the logit
  // (whose order is the softmax's), or under the grouped gate (PolicyFacts::grouped_gate)
  // the choice score of model/grouped_gate.h, bias added and groups masked.
  std::vector<float> best_score;
  // Every expert, descending best_score (ties: lower id first).
  std::vector<int32_t> ranking;
  // The union over tokens of each token's top-k, descending by the best score an expert
  // had among the tokens that picked it (ties: lower id first).
  std::vector<int32_t> topk;
};

// The routers of every MoE layer, read once as f32 from the facts.
class RouterTable {
 public:
  // `policy` names the policy in errors (it needs the router weights).
  RouterTable(const PolicyFacts& facts, const std::string& policy);
  // Layer `layer`'s router applied to `n_tokens` rows of `hidden` ([n_tokens, d]).
  RouterPrediction Predict(int layer, const float* hidden, int64_t n_tokens, int64_t d) const;

 private:
  std::string policy_;
  int num_experts_ = 0, top_k_ = 0, hidden_size_ = 0;
  std::vector<std::vector<float>> routers_;  // Per layer [E, d] (empty for dense layers).
  std::optional<GroupedGate> grouped_gate_;
  std::vector<std::vector<float>> biases_;        // Per layer [E] score correction, or empty.
  std::vector<std::vector<float>> logit_biases_;  // Per layer [E] router Linear bias, or empty.
};

}  // namespace moex::policy

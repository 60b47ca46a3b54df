// How good a policy's predictions are, per layer and per look-ahead distance (EVALUATION.md):
// every prefetch a policy asks for is a prediction that an expert will be routed to at the
// next gate of its layer. The distance is the number of MoE gates from the event that made
// the prediction to that gate (1 = the next gate). At the gate a prediction is correct if
// the expert is routed to, and in time if it was also wholly resident and landed there.
//   precision(d) = correct / predicted, recall(>= d) = correct at distance >= d / routed,
//   GoodPred(d) = in time / predicted — ProMoE's Accuracy x FetchRate (§3.1; the paper's
//   formula is lost in the text, this is the product's count form).
// An expert predicted several times before its gate counts once, at its farthest distance.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "policy/events.h"

namespace moex::tiers {

class PredictionMetrics {
 public:
  PredictionMetrics(const std::vector<char>& moe_layer, int num_experts);

  // Where the events are: before the first gate of a pass (iteration begin or end, request
  // events), or at a layer's gate.
  void AtPassBoundary() { position_ = -1; }
  void AtGate(int layer) { position_ = moe_index_[static_cast<size_t>(layer)]; }
  void Predict(const policy::ExpertKey& key);
  // Scores the predictions for this gate. `in_time(expert)`: resident and landed.
  void Resolve(int layer, std::span<const int32_t> routed,
               const std::function<bool(int32_t)>& in_time);

  struct Bucket {
    int64_t predicted = 0;
    int64_t correct = 0;
    int64_t in_time = 0;
  };
  // [layer][distance - 1], distances 1..num_moe_layers.
  const std::vector<std::vector<Bucket>>& buckets() const { return buckets_; }
  const std::vector<int64_t>& routed() const { return routed_; }
  bool any() const;
  // {"by_distance": [...], "layers": [...]}: precision, recall, GoodPred per distance.
  nlohmann::json ToJson() const;

 private:
  int Distance(int target_moe_index) const;

  int num_moe_ = 0;
  int num_experts_ = 0;
  std::vector<int> moe_index_;                   // Per decoder layer, -1 for dense.
  int position_ = -1;                            // MoE index of the current gate, -1 between.
  std::vector<std::vector<int>> pending_;        // [layer][expert] farthest distance, 0 = none.
  std::vector<std::vector<Bucket>> buckets_;     // [layer][distance - 1]
  std::vector<int64_t> routed_;                  // Per layer.
};

}  // namespace moex::tiers

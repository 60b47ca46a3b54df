// The decoder layers that have routed experts, numbered in order: MoE ordinal i is the i-th
// of them. Policies keep their per-MoE-layer tables (EAM rows, expert maps, predicted paths,
// per-layer predictors) by ordinal and name experts by decoder layer; this is the one map
// between the two, built from PolicyFacts::moe_layer.
#pragma once

#include <cstddef>
#include <vector>

#include "policy/policy_facts.h"

namespace moex::policy {

class MoeLayers {
 public:
  MoeLayers() = default;
  explicit MoeLayers(const PolicyFacts& facts) {
    ordinal_.assign(static_cast<size_t>(facts.num_layers), -1);
    for (int l = 0; l < facts.num_layers; ++l)
      if (facts.IsMoeLayer(l)) {
        ordinal_[static_cast<size_t>(l)] = count();
        layers_.push_back(l);
      }
  }

  // MoE layers in the model.
  int count() const { return static_cast<int>(layers_.size()); }
  // The MoE ordinal of a decoder layer; -1 for a dense layer or one out of range.
  int Ordinal(int layer) const {
    return layer >= 0 && static_cast<size_t>(layer) < ordinal_.size()
               ? ordinal_[static_cast<size_t>(layer)]
               : -1;
  }
  // The decoder layer of MoE ordinal `ordinal`, 0 <= ordinal < count().
  int Layer(int ordinal) const { return layers_[static_cast<size_t>(ordinal)]; }
  // The MoE layers' decoder indices, ascending.
  const std::vector<int>& layers() const { return layers_; }

 private:
  std::vector<int> ordinal_;  // [num_layers] MoE ordinal, -1 for a dense layer.
  std::vector<int> layers_;   // [count()] decoder layer.
};

}  // namespace moex::policy

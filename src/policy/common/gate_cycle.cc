#include "policy/common/gate_cycle.h"

#include "core/error.h"

namespace moex::policy {

GateCycle::GateCycle(const std::vector<char>& moe_layer) : position_(moe_layer.size(), -1) {
  for (size_t l = 0; l < moe_layer.size(); ++l) {
    if (!moe_layer[l]) continue;
    position_[l] = static_cast<int>(order_.size());
    order_.push_back(static_cast<int>(l));
  }
  Check(!order_.empty(), "gate cycle: the model has no MoE layer");
}

void GateCycle::AfterGate(int layer) {
  const int p = PositionOf(layer);
  Check(p >= 0, "gate cycle: a gate of dense layer ", layer);
  upcoming_ = (p + 1) % size();
  serving_ = -1;
}

int GateCycle::GatesUntil(int layer) const {
  const int p = PositionOf(layer);
  if (p == serving_) return size() + 1;
  return (p - upcoming_ + size()) % size() + 1;
}

}  // namespace moex::policy

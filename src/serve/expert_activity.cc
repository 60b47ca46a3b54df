#include "serve/expert_activity.h"

#include <algorithm>

#include "core/error.h"

namespace moex::serve {

ExpertActivity::ExpertActivity(int num_layers, int num_experts)
    : num_layers_(num_layers),
      num_experts_(num_experts),
      activations_(static_cast<size_t>(num_layers) * static_cast<size_t>(num_experts), 0),
      accesses_(static_cast<size_t>(num_layers), 0) {}

void ExpertActivity::OnGate(const policy::GateEvent& e) {
  // A gate outside the shape the counts were sized for is a wiring bug, not bad input.
  Check(e.layer >= 0 && e.layer < num_layers_, "gate of layer ", e.layer, " outside 0..",
        num_layers_ - 1);
  ++gates_;
  int64_t* row = &activations_[static_cast<size_t>(e.layer) * static_cast<size_t>(num_experts_)];
  const int64_t slots = e.n_tokens * e.top_k;
  for (int64_t s = 0; s < slots; ++s) {
    const int32_t expert = e.ids[s];
    if (expert >= 0 && expert < num_experts_) ++row[expert];
  }
  for (int32_t expert : e.routed_experts()) {
    if (expert < 0 || expert >= num_experts_) continue;
    ++accesses_[static_cast<size_t>(e.layer)];
    ++pass_experts_;
  }
}

int64_t ExpertActivity::activations(int layer, int expert) const {
  return activations_[static_cast<size_t>(layer) * static_cast<size_t>(num_experts_) +
                      static_cast<size_t>(expert)];
}

}  // namespace moex::serve

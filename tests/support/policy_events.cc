#include "support/policy_events.h"

#include <deque>
#include <mutex>

namespace moex::testing {

ModelConfig SmallPolicyConfig(int num_layers) {
  ModelConfig c;
  c.arch = Arch::kOlmoe;
  c.hidden_size = 8;
  c.num_layers = num_layers;
  c.num_experts = 6;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 16;
  return c;
}

policy::GateEvent TopTwoGate(int layer, const std::vector<int32_t>& ids,
                             const std::vector<float>* hidden) {
  policy::GateEvent e;
  e.layer = layer;
  e.n_tokens = static_cast<int64_t>(ids.size()) / 2;
  e.top_k = 2;
  e.num_experts = 6;
  e.ids = ids.data();
  e.hidden = hidden ? hidden->data() : nullptr;
  e.d = hidden ? 8 : 0;
  return Routed(e);
}

policy::GateEvent Routed(policy::GateEvent e) {
  static std::mutex mutex;
  static std::deque<std::vector<int32_t>> kept;  // Stable addresses; a test's events are few.
  std::lock_guard<std::mutex> lock(mutex);
  policy::SetRouted(&e, &kept.emplace_back());
  return e;
}

}  // namespace moex::testing

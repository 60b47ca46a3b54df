// The static facts a policy is built with, as plain values: the model's MoE shape, the
// cache's geometry, and the router weights as f32 arrays. A policy never sees the engine,
// the model loader or the cache itself, so the live engine and the trace-replay simulator
// can build the same facts and get the same decisions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/grouped_gate.h"
#include "policy/future_demand.h"

namespace moex::policy {

class PolicyWorker;

// Modelled or measured cost of one decode step's pieces (ms), for policies that plan
// against time (MoEpic's configurator, Eqs. 5-7). Zero where the driver knows none.
struct StepCosts {
  double attention_ms = 0;    // One layer's attention block for one token.
  double expert_ms = 0;       // One whole routed expert for one token.
  double head_ms = 0;         // Final norm and LM head for one token.
  double load_expert_ms = 0;  // One whole expert over the link into the cache tier.
  bool known() const { return expert_ms > 0 && load_expert_ms > 0; }
};

struct PolicyFacts {
  // Model shape. Keys index layer * num_experts + expert over every decoder layer.
  std::string model_name;
  int num_layers = 0;
  std::vector<char> moe_layer;  // [num_layers] 1 where the layer has routed experts.
  int num_experts = 0;
  int top_k = 0;
  int hidden_size = 0;  // d of gate inputs and pooled embeddings.
  int neurons = 0;      // F of one routed expert.

  // Cache geometry.
  int chunk_neurons = 0;  // Unit of transfer and residency; ranges round out to chunks.
  int64_t expert_bytes = 0;
  int64_t page_bytes = 0;  // One chunk's page.
  int64_t capacity_pages = 0;
  int64_t capacity_experts = 0;  // Whole experts the cache can hold.

  uint64_t seed = 0;
  // The simulator's cost model on its hardware profile; the engine leaves it zero.
  StepCosts step_costs;

  // Row-major [num_experts, hidden_size] router weights of a MoE layer, converted to f32.
  // Null when the driver has none (e.g. a trace recorded without router tensors).
  std::function<std::vector<float>(int layer)> router_weights;
  // How the routers choose, when it is DeepSeek-V2/V3's grouped gate (also GLM-4.5's); unset:
  // the k largest logits. With it, the [num_experts] score correction of a MoE layer
  // (V3's e_score_correction_bias), empty when the driver has none.
  std::optional<GroupedGate> grouped_gate;
  std::function<std::vector<float>(int layer)> router_bias;
  // The [num_experts] bias of a MoE layer's router Linear (gpt-oss), added to the logits
  // before any choice; null or empty when the router has none.
  std::function<std::vector<float>(int layer)> router_logit_bias;
  // Every future gate of the replay: only the simulator has it (belady, oracle).
  const FutureDemand* future = nullptr;
  // Where a policy runs heavy work off the forward pass. Owned by the driver; never null
  // once the driver built the facts.
  PolicyWorker* worker = nullptr;

  bool IsMoeLayer(int layer) const {
    return layer >= 0 && layer < num_layers && moe_layer[static_cast<size_t>(layer)] != 0;
  }
  // The next MoE layer after `layer`, or -1.
  int NextMoeLayer(int layer) const {
    for (int l = layer + 1; l < num_layers; ++l)
      if (IsMoeLayer(l)) return l;
    return -1;
  }
  int num_moe_layers() const {
    int n = 0;
    for (char m : moe_layer) n += m != 0;
    return n;
  }
  int chunks_per_expert() const {
    return chunk_neurons > 0 ? (neurons + chunk_neurons - 1) / chunk_neurons : 1;
  }
};

}  // namespace moex::policy

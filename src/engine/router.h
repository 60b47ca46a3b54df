// Softmax top-k routing, shared by every architecture: probabilities over all experts, the
// k largest (ties to the lower index), optionally renormalised to sum to one, then scaled.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "policy/events.h"

namespace moex {

struct Routing {
  int64_t n_tokens = 0;
  int top_k = 0;
  int num_experts = 0;
  std::vector<int32_t> ids;    // [n_tokens, top_k], in descending probability.
  std::vector<float> weights;  // [n_tokens, top_k]
  std::vector<float> probs;    // [n_tokens, num_experts] full softmax probabilities.
};

// logits: [n, E] router outputs. Fills `routing` (reusing its storage).
void RouteTopK(const float* logits, int64_t n, const ModelConfig& config, Routing* routing);

// The gate event of `layer` for this routing; `hidden` [n, d] is the router's input. Views
// into `routing` and `hidden`, valid while they are.
policy::GateEvent GateEventOf(int layer, const Routing& routing, const float* hidden, int64_t d);

}  // namespace moex

// Routing, shared by every architecture: router logits -> expert ids and combine weights.
// Route() is the one entry point (the transformer, and through its gate events the
// executors, the trace recorder and the policies, see only its result):
//  * softmax top-k: probabilities over all experts, the k largest (ties to the lower
//    index), optionally renormalised to sum to one, then scaled;
//  * sparsemixer (Phi-3.5-MoE, HF `sparsemixer` in eval mode), top-2 only, see below;
//  * grouped top-k (DeepSeek-V2/V3's MoEGate), see RouteGrouped.
// Softmax top-k and sparsemixer select the experts with the k largest logits; the grouped
// gate chooses through model/grouped_gate.h, which the predicting policies
// (policy/common/router_prediction.cc) apply too.
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
  // [n_tokens, top_k]. Softmax top-k: descending probability. Sparsemixer: selection
  // order (first expert, then second), which is descending in `probs` (the first is the
  // argmax) but not always in `weights`.
  std::vector<int32_t> ids;
  std::vector<float> weights;  // [n_tokens, top_k] combine weights.
  std::vector<float> probs;    // [n_tokens, num_experts] full softmax of the logits.
  // Routing replay only (RoutingSource): the gate input policies see instead of the layer's,
  // [n_tokens, gate_input_d]. Null: the layer's own input. Route() clears it.
  const float* gate_input = nullptr;
  int64_t gate_input_d = 0;
};

// logits: [n, E] router outputs. Fills `routing` (reusing its storage) as config.router says.
// score_bias: [E] the layer's score correction (DeepSeek-V3's e_score_correction_bias) for
// RouterKind::kGroupedTopK with noaux_tc; null elsewhere.
void Route(const float* logits, int64_t n, const ModelConfig& config, Routing* routing,
           const float* score_bias = nullptr);

// DeepSeek-V2/V3's gate, per token, as HF's MoEGate (eval mode) computes it:
//   s = softmax(logits) or sigmoid(logits) (config.scoring_func);
//   c = s (+ score_bias for noaux_tc);
//   with groups (n_group > 1, not greedy): the E experts form n_group consecutive groups,
//   each scored by its max c (group_limited_greedy) or the sum of its two largest c
//   (noaux_tc); the topk_group best groups stay, c of every other expert becomes 0;
//   ids = the k largest c (descending, ties to the lower index);
//   weights = s at ids (never the bias), divided by (their sum + 1e-20) when
//   norm_topk_prob and k > 1; times routed_scaling_factor when scale_normalised_weights (V3)
//   or when they were not renormalised (V2).
// probs = s (the softmax, or the sigmoid scores).
void RouteGrouped(const float* logits, int64_t n, const ModelConfig& config,
                  const float* score_bias, Routing* routing);

// Softmax top-k with config.num_experts_per_tok, norm_topk_prob and routed_scaling_factor.
void RouteTopK(const float* logits, int64_t n, const ModelConfig& config, Routing* routing);

// Sparsemixer, eval mode, top-2 (throws Error for config.num_experts_per_tok != 2), with
// eps = config.router_jitter_noise. For each token, with scores s = its logits:
//   i1 = argmax s (first on ties), m1 = s[i1];
//   mask j where (m1 - s[j]) / max(|s[j]|, m1) > 2 eps;
//   w1 = softmax of the unmasked s, at i1;
//   s' = s with s'[i1] = -inf; i2 = argmax s' (first on ties), m2 = s'[i2];
//   mask j where (m2 - s[j]) / max(|s[j]|, m2) > 2 eps (note: s, not s', as HF), on s';
//   w2 = softmax of the unmasked s', at i2.
// ids = {i1, i2}, weights = {w1, w2} (no renormalisation), probs = softmax(s). In f32.
void RouteSparseMixer(const float* logits, int64_t n, const ModelConfig& config,
                      Routing* routing);

// The gate event of `layer` for this routing; `hidden` [n, d] is the router's input. Views
// into `routing` and `hidden`, valid while they are.
policy::GateEvent GateEventOf(int layer, const Routing& routing, const float* hidden, int64_t d,
                              std::vector<int32_t>* routed);

}  // namespace moex

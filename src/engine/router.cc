#include "engine/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/grouped_gate.h"

namespace moex {

void RouteTopK(const float* logits, int64_t n, const ModelConfig& config, Routing* r) {
  const int E = config.num_experts;
  const int K = config.num_experts_per_tok;
  r->n_tokens = n;
  r->top_k = K;
  r->num_experts = E;
  r->probs.assign(logits, logits + n * E);
  r->ids.resize(static_cast<size_t>(n * K));
  r->weights.resize(static_cast<size_t>(n * K));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    float* p = &r->probs[static_cast<size_t>(t * E)];
    kernels::Softmax(p, E);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += p[order[static_cast<size_t>(k)]];
    for (int k = 0; k < K; ++k) {
      const int32_t e = order[static_cast<size_t>(k)];
      float w = p[e];
      if (config.norm_topk_prob) w /= sum;
      r->ids[static_cast<size_t>(t * K + k)] = e;
      r->weights[static_cast<size_t>(t * K + k)] = w * config.routed_scaling_factor;
    }
  }
}

namespace {

// Sparsemixer's masked softmax at `pick`: the weight of s[pick] among the entries j of
// `s` (an entry of -inf stays out) not masked by (m - scores[j]) / max(|scores[j]|, m) >
// threshold, m = s[pick]. The comparison is false for NaN (0 / 0), as in torch.
float MaskedSoftmaxAt(const float* s, const float* scores, int E, int pick, float threshold) {
  const float m = s[pick];
  float sum = 0.0f;
  for (int j = 0; j < E; ++j) {
    const float factor = std::max(std::fabs(scores[j]), m);
    if ((m - scores[j]) / factor > threshold) continue;
    if (s[j] == -INFINITY) continue;
    sum += std::exp(s[j] - m);
  }
  return 1.0f / sum;  // exp(s[pick] - m) = 1, and pick is never masked (0 > threshold fails).
}

int ArgMax(const float* s, int E) {
  int best = 0;
  for (int j = 1; j < E; ++j)
    if (s[j] > s[best]) best = j;
  return best;
}

}  // namespace

void Route(const float* logits, int64_t n, const ModelConfig& config, Routing* routing,
           const float* score_bias) {
  routing->gate_input = nullptr;
  routing->gate_input_d = 0;
  switch (config.router) {
    case RouterKind::kSoftmaxTopK:
      return RouteTopK(logits, n, config, routing);
    case RouterKind::kSparseMixer:
      return RouteSparseMixer(logits, n, config, routing);
    case RouterKind::kGroupedTopK:
      return RouteGrouped(logits, n, config, score_bias, routing);
  }
}

void RouteGrouped(const float* logits, int64_t n, const ModelConfig& config,
                  const float* score_bias, Routing* r) {
  const int E = config.num_experts;
  const int K = config.num_experts_per_tok;
  const GroupedGate gate = GroupedGate::Of(config);
  r->n_tokens = n;
  r->top_k = K;
  r->num_experts = E;
  r->probs.assign(logits, logits + n * E);
  r->ids.resize(static_cast<size_t>(n * K));
  r->weights.resize(static_cast<size_t>(n * K));
  std::vector<float> choice(static_cast<size_t>(E));
  GroupedGate::Scratch scratch;
  const bool renormalise = config.norm_topk_prob && K > 1;
  const bool scale = config.scale_normalised_weights || !renormalise;
  for (int64_t t = 0; t < n; ++t) {
    float* s = &r->probs[static_cast<size_t>(t * E)];
    int32_t* ids = &r->ids[static_cast<size_t>(t * K)];
    gate.Score(s);
    gate.Choice(s, score_bias, choice.data(), &scratch);
    gate.Pick(choice.data(), ids, &scratch);
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += s[ids[k]];
    const float denominator = sum + 1e-20f;
    for (int k = 0; k < K; ++k) {
      float w = s[ids[k]];
      if (renormalise) w /= denominator;
      if (scale) w *= config.routed_scaling_factor;
      r->weights[static_cast<size_t>(t * K + k)] = w;
    }
  }
}

void RouteSparseMixer(const float* logits, int64_t n, const ModelConfig& config, Routing* r) {
  const int E = config.num_experts;
  Check(config.num_experts_per_tok == 2,
        "sparsemixer routing is defined for top-2 only, got num_experts_per_tok = ",
        config.num_experts_per_tok);
  Check(E >= 2, "sparsemixer routing needs at least 2 experts, got ", E);
  const float threshold = static_cast<float>(2.0 * config.router_jitter_noise);
  r->n_tokens = n;
  r->top_k = 2;
  r->num_experts = E;
  r->probs.assign(logits, logits + n * E);
  r->ids.resize(static_cast<size_t>(n * 2));
  r->weights.resize(static_cast<size_t>(n * 2));
  std::vector<float> masked(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    const float* s = logits + t * E;
    const int i1 = ArgMax(s, E);
    const float w1 = MaskedSoftmaxAt(s, s, E, i1, threshold);
    std::copy(s, s + E, masked.begin());
    masked[static_cast<size_t>(i1)] = -INFINITY;
    const int i2 = ArgMax(masked.data(), E);
    const float w2 = MaskedSoftmaxAt(masked.data(), s, E, i2, threshold);
    r->ids[static_cast<size_t>(t * 2)] = i1;
    r->ids[static_cast<size_t>(t * 2 + 1)] = i2;
    r->weights[static_cast<size_t>(t * 2)] = w1;
    r->weights[static_cast<size_t>(t * 2 + 1)] = w2;
    kernels::Softmax(&r->probs[static_cast<size_t>(t * E)], E);
  }
}

policy::GateEvent GateEventOf(int layer, const Routing& routing, const float* hidden, int64_t d,
                              std::vector<int32_t>* routed) {
  policy::GateEvent e;
  e.layer = layer;
  e.n_tokens = routing.n_tokens;
  e.top_k = routing.top_k;
  e.num_experts = routing.num_experts;
  e.ids = routing.ids.data();
  e.weights = routing.weights.data();
  e.probs = routing.probs.empty() ? nullptr : routing.probs.data();
  e.hidden = routing.gate_input != nullptr ? routing.gate_input : hidden;
  e.d = routing.gate_input != nullptr ? routing.gate_input_d : d;
  policy::SetRouted(&e, routed);
  return e;
}

}  // namespace moex

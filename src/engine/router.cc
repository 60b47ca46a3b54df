#include "engine/router.h"

#include <algorithm>
#include <numeric>

#include "kernels/ops.h"

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

policy::GateEvent GateEventOf(int layer, const Routing& routing, const float* hidden, int64_t d) {
  policy::GateEvent e;
  e.layer = layer;
  e.n_tokens = routing.n_tokens;
  e.top_k = routing.top_k;
  e.num_experts = routing.num_experts;
  e.ids = routing.ids.data();
  e.weights = routing.weights.data();
  e.probs = routing.probs.empty() ? nullptr : routing.probs.data();
  e.hidden = hidden;
  e.d = d;
  return e;
}

}  // namespace moex

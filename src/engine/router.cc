#include "engine/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
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
  const int groups = config.n_group;
  const int per_group = E / groups;
  const bool grouped = config.topk_method != TopKMethod::kGreedy && groups > 1;
  const bool bias = config.topk_method == TopKMethod::kNoauxTc && score_bias != nullptr;
  r->n_tokens = n;
  r->top_k = K;
  r->num_experts = E;
  r->probs.assign(logits, logits + n * E);
  r->ids.resize(static_cast<size_t>(n * K));
  r->weights.resize(static_cast<size_t>(n * K));
  std::vector<float> choice(static_cast<size_t>(E)), group_score(static_cast<size_t>(groups));
  std::vector<int32_t> order(static_cast<size_t>(E)), group_order(static_cast<size_t>(groups));
  std::vector<char> keep(static_cast<size_t>(groups));
  for (int64_t t = 0; t < n; ++t) {
    float* s = &r->probs[static_cast<size_t>(t * E)];
    if (config.scoring_func == ScoringFunc::kSigmoid) {
      for (int e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-s[e]));
    } else {
      kernels::Softmax(s, E);
    }
    for (int e = 0; e < E; ++e) choice[static_cast<size_t>(e)] = s[e] + (bias ? score_bias[e] : 0.0f);
    if (grouped) {
      for (int g = 0; g < groups; ++g) {
        const float* c = &choice[static_cast<size_t>(g * per_group)];
        float best = c[0], second = -INFINITY;
        for (int i = 1; i < per_group; ++i) {
          if (c[i] > best) {
            second = best;
            best = c[i];
          } else if (c[i] > second) {
            second = c[i];
          }
        }
        group_score[static_cast<size_t>(g)] =
            config.topk_method == TopKMethod::kNoauxTc ? best + second : best;
      }
      std::iota(group_order.begin(), group_order.end(), 0);
      const float* gs = group_score.data();
      std::partial_sort(group_order.begin(), group_order.begin() + config.topk_group,
                        group_order.end(), [gs](int32_t a, int32_t b) {
                          return gs[a] > gs[b] || (gs[a] == gs[b] && a < b);
                        });
      std::fill(keep.begin(), keep.end(), 0);
      for (int g = 0; g < config.topk_group; ++g) keep[static_cast<size_t>(group_order[static_cast<size_t>(g)])] = 1;
      for (int e = 0; e < E; ++e)
        if (!keep[static_cast<size_t>(e / per_group)]) choice[static_cast<size_t>(e)] = 0.0f;
    }
    std::iota(order.begin(), order.end(), 0);
    const float* c = choice.data();
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [c](int32_t a, int32_t b) { return c[a] > c[b] || (c[a] == c[b] && a < b); });
    const bool renormalise = config.norm_topk_prob && K > 1;
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += s[order[static_cast<size_t>(k)]];
    const float denominator = sum + 1e-20f;
    const bool scale = config.scale_normalised_weights || !renormalise;
    for (int k = 0; k < K; ++k) {
      const int32_t e = order[static_cast<size_t>(k)];
      float w = s[e];
      if (renormalise) w /= denominator;
      if (scale) w *= config.routed_scaling_factor;
      r->ids[static_cast<size_t>(t * K + k)] = e;
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

policy::GateEvent GateEventOf(int layer, const Routing& routing, const float* hidden, int64_t d) {
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
  return e;
}

}  // namespace moex

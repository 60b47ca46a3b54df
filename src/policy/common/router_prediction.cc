#include "policy/common/router_prediction.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace moex::policy {

RouterTable::RouterTable(const PolicyFacts& f, const std::string& policy)
    : policy_(policy),
      num_experts_(f.num_experts),
      top_k_(f.top_k),
      hidden_size_(f.hidden_size),
      grouped_gate_(f.grouped_gate) {
  Check(f.router_weights != nullptr, "policy ", policy, " needs the model's router weights");
  routers_.resize(static_cast<size_t>(f.num_layers));
  biases_.resize(static_cast<size_t>(f.num_layers));
  logit_biases_.resize(static_cast<size_t>(f.num_layers));
  for (int l = 0; l < f.num_layers; ++l) {
    if (!f.IsMoeLayer(l)) continue;
    if (grouped_gate_ && f.router_bias) biases_[static_cast<size_t>(l)] = f.router_bias(l);
    if (f.router_logit_bias) logit_biases_[static_cast<size_t>(l)] = f.router_logit_bias(l);
    routers_[static_cast<size_t>(l)] = f.router_weights(l);
    Check(routers_[static_cast<size_t>(l)].size() ==
              static_cast<size_t>(f.num_experts) * static_cast<size_t>(f.hidden_size),
          "policy ", policy, ": router of layer ", l, " has the wrong shape");
  }
}

RouterPrediction RouterTable::Predict(int layer, const float* hidden, int64_t n_tokens,
                                      int64_t d) const {
  Check(d == hidden_size_, "policy ", policy_, ": gate input of width ", d,
        " where the routers take ", hidden_size_);
  Check(layer >= 0 && static_cast<size_t>(layer) < routers_.size() &&
            !routers_[static_cast<size_t>(layer)].empty(),
        "policy ", policy_, ": layer ", layer, " has no router");
  const std::vector<float>& w = routers_[static_cast<size_t>(layer)];
  const size_t E = static_cast<size_t>(num_experts_);
  const int k = std::min(top_k_, num_experts_);
  const std::vector<float>& bias = biases_[static_cast<size_t>(layer)];
  const std::vector<float>& logit_bias = logit_biases_[static_cast<size_t>(layer)];
  RouterPrediction p;
  p.best_score.assign(E, -1e30f);
  std::vector<float> chosen_best(E, -1e30f);  // Max score over the tokens that picked it.
  std::vector<char> chosen(E, 0);
  std::vector<float> logits(E), score(E);
  std::vector<int32_t> picks(static_cast<size_t>(k));
  GroupedGate::Scratch scratch;
  GroupedGate greedy;  // The k largest logits: softmax top-k and sparsemixer choose so.
  greedy.num_experts = num_experts_;
  greedy.top_k = k;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* h = hidden + t * d;
    for (size_t x = 0; x < E; ++x) {
      const float* row = &w[x * static_cast<size_t>(d)];
      float s = 0;
      for (int64_t j = 0; j < d; ++j) s += row[j] * h[j];
      logits[x] = logit_bias.empty() ? s : s + logit_bias[x];
    }
    if (grouped_gate_) {
      grouped_gate_->Score(logits.data());
      grouped_gate_->Choice(logits.data(), bias.empty() ? nullptr : bias.data(), score.data(),
                            &scratch);
    } else {
      score = logits;
    }
    greedy.Pick(score.data(), picks.data(), &scratch);
    for (size_t x = 0; x < E; ++x) p.best_score[x] = std::max(p.best_score[x], score[x]);
    for (int32_t id : picks) {
      const size_t x = static_cast<size_t>(id);
      chosen[x] = 1;
      chosen_best[x] = std::max(chosen_best[x], score[x]);
    }
  }
  for (size_t x = 0; x < E; ++x)
    if (chosen[x]) p.topk.push_back(static_cast<int32_t>(x));
  std::stable_sort(p.topk.begin(), p.topk.end(), [&](int32_t a, int32_t b) {
    return chosen_best[static_cast<size_t>(a)] > chosen_best[static_cast<size_t>(b)];
  });
  p.ranking.resize(E);
  std::iota(p.ranking.begin(), p.ranking.end(), 0);
  std::stable_sort(p.ranking.begin(), p.ranking.end(), [&](int32_t a, int32_t b) {
    return p.best_score[static_cast<size_t>(a)] > p.best_score[static_cast<size_t>(b)];
  });
  return p;
}

}  // namespace moex::policy

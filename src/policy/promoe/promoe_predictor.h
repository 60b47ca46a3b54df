// ProMoE's learned expert predictor (ProMoE §4.2): per target layer, a two-layer MLP from
// an earlier layer's gate input (the hidden state entering its MoE block) to scores over
// the target layer's experts; the top-k of the scores is the prefetch set.
//
// The paper gives the shape (two layers, ~2M parameters at d = 2048) and nothing else; the
// choices here (ReLU, softmax cross-entropy against the routed set as a uniform target,
// Adam, He initialisation, minibatches) are documented in docs/policies/promoe.md.
// Training is deterministic given the seed: samples are visited in a seeded order and every
// product runs in a fixed order on one thread.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/policy_state.h"

namespace moex::policy {

struct MlpTraining {
  int epochs = 4;
  int batch = 64;
  double learning_rate = 1e-3;
  uint64_t seed = 1;
};

// How well a predictor picks a layer's routed experts: over samples, the mean share of the
// routed set found in the predictor's top-k (the paper's "accuracy").
struct PredictorScore {
  double loss = 0;
  double accuracy = 0;
  int64_t samples = 0;
};

class ExpertPredictorMlp {
 public:
  ExpertPredictorMlp() = default;
  // Random (He) initialisation from `seed`.
  ExpertPredictorMlp(int d, int hidden, int experts, uint64_t seed);

  bool empty() const { return d_ == 0; }
  int d() const { return d_; }
  int hidden() const { return hidden_; }
  int experts() const { return experts_; }
  int64_t parameters() const;

  // Expert scores (logits) [n, experts] of inputs x [n, d].
  void Forward(const float* x, int64_t n, float* scores) const;

  // Trains on samples x [n, d] whose routed experts are ids [n, k] (k ids per sample).
  // Returns the training loss of the last epoch.
  double Train(const float* x, const int32_t* ids, int64_t n, int k, const MlpTraining& t);
  // Softmax cross-entropy and top-k accuracy on samples the predictor did not train on.
  PredictorScore Evaluate(const float* x, const int32_t* ids, int64_t n, int k) const;

  void Save(StateWriter& out) const;
  void Load(StateReader& in);

 private:
  int d_ = 0, hidden_ = 0, experts_ = 0;
  std::vector<float> w1_, b1_;  // [hidden, d], [hidden]
  std::vector<float> w2_, b2_;  // [experts, hidden], [experts]
};

// The k highest of `scores` ([n] values), descending (ties: lower index first).
std::vector<int32_t> TopKIndices(const float* scores, int n, int k);

}  // namespace moex::policy

// ExpertFlow's routing-path predictor (ExpertFlow §3.1): from token ids only (the prompt and
// the tokens generated so far), the L × E routing path of the next token: one head of E
// logits per MoE layer, trained with a per-layer binary cross-entropy (active / idle per
// expert), decoupled from the MoE's hidden states.
//
// The paper's model is a tiny T5 encoder-decoder (7.21 MB). This one is an MLP over token
// embeddings (docs/policies/expertflow.md gives the measured accuracy of both on the same
// traces): the features of token x_t are the embeddings of x_t, x_{t-1}, x_{t-2} and the
// mean embedding of the prompt (what the encoder summarises), concatenated; one ReLU hidden
// layer; L × E logits. Inference is incremental: a request keeps its pooled prompt
// embedding and its last two tokens (RequestContext), so each generated token costs one
// MLP evaluation.
//
// Training (the paper's parameters): Adam with decoupled weight decay 0.01, learning rate
// 1e-3 on a cosine schedule, minibatch 16; embedding rows are updated lazily (only the rows
// a minibatch touches, as sparse Adam). Deterministic given the seed: samples are visited
// in a seeded order and every product runs in a fixed order on one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "policy/common/routing_path.h"
#include "policy/policy_state.h"

namespace moex::policy {

struct PathTraining {
  int epochs = 4;
  int batch = 16;
  double learning_rate = 1e-3;
  double weight_decay = 0.01;
  uint64_t seed = 1;
};

// One request's token sequence and, per token, its routing path over the MoE layers
// (the predictor's heads: moe layer index × expert).
struct PathSequence {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;     // Every routed token in order: the prompt, then generated.
  std::vector<RoutingPath> paths;  // [tokens.size()] (empty path: never routed).
};

// What inference keeps per request: the pooled prompt embedding and the last tokens.
struct RequestContext {
  std::vector<float> prompt_mean;  // [dim]; zeros when the prompt is empty.
  int32_t prev1 = -1, prev2 = -1;  // The two tokens before the next one (-1: none).
};

class RoutingPathPredictor {
 public:
  static constexpr int kSlots = 4;  // current, previous, the one before, prompt mean.

  RoutingPathPredictor() = default;
  // Random initialisation from `seed`: vocab token ids, `dim` wide embeddings, `hidden`
  // wide ReLU layer, `layers` heads of `experts` logits.
  RoutingPathPredictor(int vocab, int dim, int hidden, int layers, int experts, uint64_t seed);

  bool empty() const { return vocab_ == 0; }
  int vocab() const { return vocab_; }
  int dim() const { return dim_; }
  int hidden() const { return hidden_; }
  int layers() const { return layers_; }
  int experts() const { return experts_; }
  int64_t parameters() const;

  // The context of a request that has just begun with `prompt`.
  RequestContext Begin(const int32_t* prompt, int64_t n) const;
  // Logits [layers × experts] of the next token `token` in context `ctx`; then `ctx`
  // advances past it.
  void Step(RequestContext* ctx, int32_t token, float* logits) const;
  // Logits [n × layers·experts] of tokens[i], each after contexts[i] (left unchanged).
  void Predict(const std::vector<RequestContext>& contexts, const std::vector<int32_t>& tokens,
               float* logits) const;
  // The context after `token`, without computing its logits.
  static void Advance(RequestContext* ctx, int32_t token) {
    ctx->prev2 = ctx->prev1;
    ctx->prev1 = token;
  }

  // Trains on every token of `sequences`; returns the training loss (mean BCE per bit) of
  // the last epoch. `progress(done, total)` is called after every minibatch.
  double Train(const std::vector<PathSequence>& sequences, const PathTraining& t,
               const std::function<void(int64_t, int64_t)>& progress = {});
  // Mean BCE per bit over every token of `sequences`.
  double Loss(const std::vector<PathSequence>& sequences) const;

  void Save(StateWriter& out) const;
  void Load(StateReader& in);

 private:
  // Features of one token: kSlots embeddings side by side ([kSlots × dim]).
  void Features(const RequestContext& ctx, int32_t token, float* x) const;
  int32_t Clamp(int32_t token) const;  // Ids outside the vocabulary share the last row.

  int vocab_ = 0, dim_ = 0, hidden_ = 0, layers_ = 0, experts_ = 0;
  std::vector<float> emb_;      // [vocab, dim]
  std::vector<float> w1_, b1_;  // [hidden, kSlots·dim], [hidden]
  std::vector<float> w2_, b2_;  // [layers·experts, hidden], [layers·experts]
};

// A token's predicted path: per layer, the `k` highest logits (ties: lower id), the
// binarisation that gives each token exactly the k experts the MoE picks.
RoutingPath TopKPath(const float* logits, int layers, int experts, int k);
// Or every expert whose probability σ(logit) reaches `threshold` (in (0, 1)): the reading of
// "active / idle" status classification that predicts only what it is sure of.
RoutingPath ThresholdPath(const float* logits, int layers, int experts, double threshold);

}  // namespace moex::policy

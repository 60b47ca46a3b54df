// ExpertFlow (He et al., "ExpertFlow: Optimized Expert Activation and Token Allocation for
// Efficient Mixture-of-Experts Inference"): a routing-path predictor from token ids (§3.1,
// expertflow_predictor.h), predictive locality-aware caching across layers (PLEC, §3.2,
// plec.h) and real-time correction at each gate (§3.2). The server's token regrouping
// (§3.3) asks this policy for each request's predicted path (PredictPassPath).
// docs/policies/expertflow.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "policy/common/routing_path.h"
#include "policy/expertflow/expertflow_predictor.h"
#include "policy/expertflow/plec.h"
#include "policy/expertflow/routing_path_accuracy.h"
#include "policy/moe_layers.h"
#include "policy/params.h"
#include "policy/policy.h"
#include "policy/registry.h"

namespace moex::policy {

// Learned routing-path predictor (§3.1), or every token predicted as the most frequently
// routed experts.
enum class ExpertFlowPredictor { kLearned, kFrequency };

struct ExpertFlowOptions {
  using Predictor = ExpertFlowPredictor;
  Predictor predictor = Predictor::kLearned;
  int topk = 0;  // 0: the model's top-k.
  double threshold = 0.5;
  bool cancel = true;
  int dim = 32, hidden = 256, epochs = 4, batch = 16;
  double lr = 0.001, wd = 0.01;
  uint64_t seed = 1;
  int regroup_tokens = 64;
  bool regroup = true;
  WorkerGflops worker;

  template <class V>
  void VisitParams(V& v) {
    v.Choice("predictor", predictor,
             {{Predictor::kLearned, "learned"}, {Predictor::kFrequency, "frequency"}},
             "learned routing-path predictor (§3.1), or every token predicted as the most "
             "frequently routed experts (a baseline that also learns while serving)");
    v.Int("topk", topk, 0, 1 << 16,
          "experts per token and layer a path predicts: its highest logits (0: the model's "
          "top-k)");
    v.Real("threshold", threshold, 0, 0.999,
           "a token's path: every expert whose predicted probability reaches this (status "
           "classification); 0: the top-k logits instead");
    v.Bool("cancel", cancel,
           "at a gate, cancel the layer's mis-prefetches (queued reads stop, landed ones leave)");
    v.Int("dim", dim, 1, 4096, "predictor token embedding width");
    v.Int("hidden", hidden, 1, 65536, "predictor hidden layer width");
    v.Int("epochs", epochs, 1, 1000, "training epochs over the learning traces' tokens");
    v.Int("batch", batch, 1, 1 << 16, "training minibatch (the paper's 16)");
    v.Real("lr", lr, 1e-7, 1, "Adam learning rate, cosine-decayed (the paper's)");
    v.Real("wd", wd, 0, 1, "decoupled weight decay (the paper's 0.01)");
    v.Int("seed", seed, 0, 1e15, "initialisation and sample-order seed");
    v.Int("regroup_tokens", regroup_tokens, 1, 1 << 20,
          "most tokens of a pass PredictPassPath evaluates (token regrouping)");
    v.Bool("regroup", regroup,
           "answer the server's token regrouping (moex serve --regroup) with the predicted "
           "paths");
    worker.VisitParams(v);
  }
};

class ExpertFlowPolicy : public Policy {
 public:
  ExpertFlowPolicy(const PolicyFacts& facts, const ExpertFlowOptions& options);

  std::string name() const override;

  // The predicted routing path of the pass `c` would run next: num_moe_layers × num_experts
  // (row i is the i-th MoE layer), the OR over c's tokens of each token's top-k path, given
  // the request's history as this policy has seen it (RequestBegin's prompt, then the
  // tokens of every pass since). Cheap: one predictor evaluation of at most
  // `regroup_tokens` tokens (a long prompt chunk counts by its first ones). An empty path
  // (Count() == 0) when nothing is learned yet or `c` has no tokens. Changes nothing.
  RoutingPath PredictPassPath(const PassCandidate& c) const;
  // Token regrouping (§3.3): the candidates' predicted paths (PredictPassPath) clustered by
  // policy/common/token_regrouping.h, which keeps the scheduler's split unless Eq. 5 drops. False
  // (no opinion) while nothing is learned or with `regroup=0`.
  bool RegroupPasses(const std::vector<PassCandidate>& candidates, int groups,
                     std::vector<int>* group) override;

  void OnRequestBegin(const RequestBeginEvent& e, Decisions* out) override;
  void OnIterationBegin(const IterationBeginEvent& e, Decisions* out) override;
  void OnGate(const GateEvent& e, Decisions* out) override;
  void OnExpertDone(const ExpertDoneEvent& e, Decisions* out) override;
  void OnIterationEnd(Decisions* out) override;
  void OnRequestEnd(const RequestEndEvent& e, Decisions* out) override;

  bool evicts() const override { return true; }
  void OnTouch(const ExpertKey& expert, bool demand) override;
  double EvictScore(const ExpertKey& expert) override;
  void ComputeOrder(int layer, std::vector<ExpertKey>* experts) override;

  void OnLearnBegin() override;
  void OnLearnEnd() override;
  void SaveState(StateWriter& out) const override;
  void LoadState(StateReader& in) override;
  void ReportJson(nlohmann::json* report) const override;

  const RoutingPathPredictor& predictor() const { return *predictor_; }
  const PlecPlan& plan() const { return plan_; }
  // Decode tokens served so far with their predicted and true paths (accuracy report).
  const std::vector<PathSample>& scored() const { return scored_; }

 private:
  using Kind = ExpertFlowPredictor;
  struct RequestState {
    RequestContext ctx;
    int64_t passes = 0;  // Passes the request has run (the first is its prefill).
  };

  bool CanPredict() const;
  // What predicting paths reads, by value: the pass's job takes it as its snapshot.
  struct PathQuery {
    std::shared_ptr<const RoutingPathPredictor> predictor;
    bool frequency = false;  // The frequency predictor: every token gets `frequent`.
    RoutingPath frequent;
    int layers = 0, experts = 0, topk = 0;
    double threshold = 0;
  };
  PathQuery Query() const;
  // Paths of `tokens`, token i after contexts[i]: [n] top-k paths (or thresholded), and the
  // predictor's logits when asked.
  static std::vector<RoutingPath> TokenPaths(const PathQuery& q,
                                             const std::vector<RequestContext>& contexts,
                                             const std::vector<int32_t>& tokens,
                                             std::vector<float>* logits = nullptr);
  // The pass's prediction, on the policy worker (PolicyWorker::Submit's snapshot form).
  struct PassQuery {
    PathQuery paths;
    std::vector<RequestContext> contexts;
    std::vector<int32_t> tokens;
    std::vector<std::pair<size_t, size_t>> scored;  // (gate row, index in scored_)
  };
  struct PassPaths {
    std::vector<RoutingPath> paths;
    // Per scored token with logits, its path binarised by top-k and by σ ≥ 0.5.
    std::vector<std::pair<RoutingPath, RoutingPath>> both;
  };
  static PassPaths PredictPass(const PassQuery& q);
  RoutingPath FrequencyPath() const;
  RequestContext FreshContext(const int32_t* prompt, int64_t n) const;
  RequestState& State(int64_t request);
  size_t Key(const ExpertKey& k) const { return KeyIndex(k, facts_.num_experts); }
  // A pass's prediction arrived: the plan starts from what the pass has done so far.
  void StartPlan(const std::vector<RoutingPath>& tokens, Decisions* out);
  // PLEC: prefetch the window of the pool not yet asked for in this pass.
  void Fill(Decisions* out);
  void Learn(const GateEvent& e);

  // Largest token id with its own embedding row (262144: above every common tokenizer's).
  static constexpr int32_t kMaxVocab = int32_t{1} << 18;

  PolicyFacts facts_;
  ExpertFlowOptions opt_;
  Kind kind_;
  int dim_, hidden_, topk_;
  double threshold_;
  int regroup_tokens_;
  bool regroup_;
  bool cancel_;
  double worker_gflops_;
  PathTraining training_;
  MoeLayers moe_;
  // Read-only once published: a job holds its own reference while learning or loading
  // publishes a new one.
  std::shared_ptr<const RoutingPathPredictor> predictor_ =
      std::make_shared<const RoutingPathPredictor>();
  double train_loss_ = 0, validation_loss_ = 0;
  int64_t train_tokens_ = 0, validation_tokens_ = 0;
  std::vector<int64_t> frequency_;  // [moe index × expert] routed tokens, learning and serving.

  // Learning.
  std::vector<PathSequence> sequences_;
  std::unordered_map<int64_t, size_t> sequence_of_;   // request -> index in sequences_
  std::vector<std::pair<size_t, size_t>> pass_rows_;  // Gate row -> (sequence, token).

  // Serving.
  std::unordered_map<int64_t, RequestState> requests_;
  PlecPlan plan_;
  uint64_t pass_ = 0;
  int gated_ = -1;                   // MoE index of the last layer gated in this pass.
  int finished_ = -1;                // MoE index of the last layer computed in this pass.
  std::vector<int32_t> routed_now_;  // The gated layer's routed experts (sorted).
  size_t done_now_ = 0;              // Of those, computed.
  std::vector<int32_t> to_cancel_;   // The gated layer's mis-prefetches.
  std::vector<char> issued_;         // [key] prefetched in this pass.
  int64_t issue_order_ = 0;
  std::vector<uint64_t> last_use_;  // [key] OnTouch clock.
  uint64_t clock_ = 0;
  bool warned_untrained_ = false;
  // Accuracy: at most kMaxScored decode tokens are kept (a long-running server stops adding).
  static constexpr size_t kMaxScored = size_t{1} << 17;
  // The pass's decode tokens (gate row, index in scored_), and every one so far.
  std::vector<std::pair<size_t, size_t>> pass_scored_;
  std::vector<PathSample> scored_;
  // Per scored token, the learned predictor's path binarised by top-k and by σ ≥ 0.5.
  std::vector<RoutingPath> topk_scored_, threshold_scored_;
  std::vector<RoutingPath> last_truth_;  // Per scored sample: the request's previous truth.
  std::unordered_map<int64_t, RoutingPath> previous_truth_;  // request -> last decode truth.
  int64_t plans_ = 0, prefetches_ = 0, cancels_ = 0;
  // Token regrouping: units asked, units whose split changed, Eq. 5 of the scheduler's
  // splits and of the chosen ones, on the predicted paths.
  int64_t regroup_units_ = 0, regroup_changed_ = 0, regroup_before_ = 0, regroup_after_ = 0;
};

}  // namespace moex::policy

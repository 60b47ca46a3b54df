// ProMoE (Song et al., "Fast MoE-based LLM Serving using Proactive Caching"): a learned
// per-layer predictor (§4.2) run off the forward pass, stride prefetching (§4.3: layer l's
// gate input predicts layer l + distance, so prediction and copying overlap), early
// preemption (§5.2: at a gate, that layer's leftover speculative prefetches are dropped and
// its routed experts become demand), and a per-layer LRU cache touched by prefetch and
// inference alike (§5.4).
//
// What moex's platform already does for it: the fetch queue has ProMoE's two levels (demand
// before every prefetch, §5.1) and transfers in chunks (neuron ranges; the simulator's
// `--chunk-neurons F/3` gives the paper's three per expert), so a demand waits one chunk; and
// the executor computes whatever has landed first, chunk by chunk, which subsumes reordered
// inference (§5.3: cached, then in flight, then not started). docs/policies/promoe.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/logging.h"
#include "core/progress.h"
#include "policy/common/router_prediction.h"
#include "policy/moe_layers.h"
#include "policy/policy_worker.h"
#include "policy/promoe/promoe_predictor.h"
#include "policy/registry.h"

namespace moex::policy {
namespace {

enum class PredictorKind { kLearned, kToken, kSkip };
// Early preemption at a gate (§5.2): that layer's leftover prefetches, every layer's, none.
enum class Preempt { kLayer, kAll, kNone };

struct PromoeOptions {
  PredictorKind predictor = PredictorKind::kLearned;
  int distance = 2;
  bool prefetch = true;
  Preempt preempt = Preempt::kLayer;
  bool layer_cache = true;
  int max_prefetch = 0;
  int hidden = 0;  // 0: d/2.
  int epochs = 4, batch = 64;
  double lr = 0.001;
  int64_t samples = 16384;
  uint64_t seed = 1;
  WorkerGflops worker;

  template <class V>
  void VisitParams(V& v) {
    v.Choice("predictor", predictor,
             {{PredictorKind::kLearned, "learned"},
              {PredictorKind::kToken, "token"},
              {PredictorKind::kSkip, "skip"}},
             "learned MLP (§4.2), token-based or skip-based (a later router on this input, "
             "§3.2)");
    v.Int("distance", distance, 1, 8,
          "MoE layers ahead a gate input predicts: 2 = stride prefetching (§4.3), 1 = "
          "layer-wise");
    v.Bool("prefetch", prefetch, "prefetch predictions (0: per-layer LRU only)");
    v.Choice("preempt", preempt,
             {{Preempt::kLayer, "layer"}, {Preempt::kAll, "all"}, {Preempt::kNone, "none"}},
             "early preemption at a gate (§5.2): drop that layer's leftover speculative "
             "prefetches, every layer's (§5.4's wording), or none");
    v.Bool("layer_cache", layer_cache,
           "equal per-layer shares of the cache (the paper's per-layer LRU); 0: one shared "
           "cache");
    v.Int("max_prefetch", max_prefetch, 0, 1 << 20,
          "most experts prefetched per layer and pass (0: the union of every token's top-k)");
    v.Int("hidden", hidden, 0, 1 << 16,
          "predictor hidden width (0: d/2, the paper's ~2M parameters at d = 2048)");
    v.Int("epochs", epochs, 1, 1000, "training epochs over the samples");
    v.Int("batch", batch, 1, 1 << 16, "training minibatch");
    v.Real("lr", lr, 1e-7, 1, "Adam learning rate");
    v.Int("samples", samples, 16, 1 << 26,
          "training samples kept per layer (a uniform reservoir over the learning traces' "
          "tokens)");
    v.Int("seed", seed, 0, 1e15, "initialisation, sampling and split seed");
    worker.VisitParams(v);
  }
};

// Training samples of one target layer: the source layer's gate inputs and the target
// layer's routed experts, kept as a uniform reservoir of at most `cap` tokens.
struct SampleReservoir {
  std::vector<float> x;
  std::vector<int32_t> ids;
  int64_t seen = 0;
};

class PromoePolicy : public Policy {
 public:
  PromoePolicy(const PolicyFacts& f, const PromoeOptions& o)
      : facts_(f),
        opt_(o),
        kind_(o.predictor),
        distance_(o.distance),
        prefetch_(o.prefetch),
        preempt_(o.preempt),
        per_layer_cache_(o.layer_cache),
        max_prefetch_(o.max_prefetch),
        sample_cap_(o.samples),
        worker_gflops_(o.worker.gflops),
        rng_(o.seed) {
    Check(f.hidden_size > 0 || kind_ == PredictorKind::kToken,
          "promoe: the model's hidden size is unknown; the learned and skip predictors need it");
    hidden_width_ = o.hidden;
    // The paper's ~2M parameters at d = 2048 is a width of about d/2; keep that ratio.
    if (hidden_width_ == 0) hidden_width_ = std::max(32, f.hidden_size / 2);
    training_.epochs = o.epochs;
    training_.batch = o.batch;
    training_.learning_rate = o.lr;
    training_.seed = o.seed;
    moe_ = MoeLayers(f);
    source_of_.assign(static_cast<size_t>(f.num_layers), -1);
    target_of_.assign(static_cast<size_t>(f.num_layers), -1);
    for (size_t i = 0; i + static_cast<size_t>(distance_) < moe_.layers().size(); ++i) {
      const int src = moe_.layers()[i], dst = moe_.layers()[i + static_cast<size_t>(distance_)];
      source_of_[static_cast<size_t>(dst)] = src;
      target_of_[static_cast<size_t>(src)] = dst;
    }
    predictors_.resize(static_cast<size_t>(f.num_layers));
    scores_.resize(static_cast<size_t>(f.num_layers));
    reservoirs_.resize(static_cast<size_t>(f.num_layers));
    if (kind_ == PredictorKind::kSkip)
      routers_ = std::make_shared<const RouterTable>(f, "promoe:predictor=skip");
  }

  std::string name() const override {
    const std::string nd = NonDefault(opt_);
    return nd.empty() ? "promoe" : "promoe:" + nd;
  }

  void OnLearnBegin() override {
    Policy::OnLearnBegin();
    for (SampleReservoir& r : reservoirs_) r = {};
  }

  void OnLearnEnd() override {
    Policy::OnLearnEnd();
    pass_hidden_.clear();
    if (kind_ != PredictorKind::kLearned) return;
    int64_t total = 0;
    Progress progress("promoe: training the layers' predictors", facts_.num_layers,
                      /*only_on_terminal=*/true);
    for (int target = 0; target < facts_.num_layers; ++target) {
      total += TrainLayer(target);
      progress.Update(target + 1);
    }
    if (total == 0)
      Log(LogLevel::kWarn,
          "promoe: the learning traces gave no training samples (record them "
          "with --hidden); the predictor stays untrained and prefetches nothing");
  }

  void OnIterationBegin(const IterationBeginEvent& e, Decisions* out) override {
    pass_tokens_.assign(e.tokens, e.tokens + (e.tokens ? e.n_tokens : 0));
    pass_hidden_.clear();
    predicted_.clear();
    gated_.clear();
    if (learning()) return;
    if (per_layer_cache_ && !budgets_sent_) {
      out->layer_budgets = LayerBudgets();
      budgets_sent_ = true;
    }
    // Token-based prediction is iteration-wise (Fig. 7a): every layer, before the pass.
    if (prefetch_ && kind_ == PredictorKind::kToken && !pass_tokens_.empty())
      for (int layer : moe_.layers()) Issue(layer, TokenPrediction(layer), out);
  }

  void OnGate(const GateEvent& e, Decisions* out) override {
    const size_t L = static_cast<size_t>(e.layer);
    if (learning()) {
      Learn(e);
      return;
    }
    if (kind_ == PredictorKind::kToken) CountTokens(e);  // The token table keeps learning.
    gated_.insert(e.layer);
    EarlyPreemption(e, out);
    if (!prefetch_ || kind_ == PredictorKind::kToken) return;
    const int target = target_of_[L];
    if (target < 0 || e.hidden == nullptr || e.d != facts_.hidden_size) return;
    if (kind_ == PredictorKind::kLearned && !Trained(target)) {
      if (!warned_untrained_)
        Log(LogLevel::kWarn,
            "promoe: no trained predictor (learn with --learn-from traces "
            "recorded with --hidden, or load --policy-state); prefetching "
            "nothing");
      warned_untrained_ = true;
      return;
    }
    // Inference runs on the policy worker, off the forward pass, on a copy of the input.
    std::vector<float> hidden(e.hidden, e.hidden + e.n_tokens * e.d);
    const int64_t n = e.n_tokens;
    const uint64_t pass = pass_;
    const std::shared_ptr<const ExpertPredictorMlp> mlp =
        kind_ == PredictorKind::kLearned ? predictors_[static_cast<size_t>(target)] : nullptr;
    facts_.worker->Submit(
        Inference{mlp, routers_, target, std::move(hidden), n, facts_.num_experts, facts_.top_k,
                  facts_.hidden_size, max_prefetch_},
        &Predict,
        [this, target, pass](const std::vector<int32_t>& picks, Decisions* d) {
          // Too late once the target's gate has come (or its pass has ended).
          if (pass != pass_ || gated_.count(target)) return;
          Issue(target, picks, d);
        },
        InferenceCostUs(target, n));
  }

  void OnIterationEnd(Decisions*) override {
    ++pass_;
    predicted_.clear();
    gated_.clear();
    pass_hidden_.clear();
  }

  void SaveState(StateWriter& out) const override {
    out.U64(predictors_.size());
    for (size_t l = 0; l < predictors_.size(); ++l) {
      out.U64(Trained(static_cast<int>(l)) ? 1 : 0);
      if (Trained(static_cast<int>(l))) predictors_[l]->Save(out);
      out.F64(scores_[l].train_loss);
      out.F64(scores_[l].eval.loss);
      out.F64(scores_[l].eval.accuracy);
      out.I64(scores_[l].eval.samples);
      out.I64(scores_[l].train_samples);
    }
    std::vector<int32_t> tokens;
    for (const auto& [t, c] : token_counts_) tokens.push_back(t);
    std::sort(tokens.begin(), tokens.end());  // A saved state does not depend on hashing.
    out.U64(tokens.size());
    for (int32_t t : tokens) {
      out.I64(t);
      const std::vector<uint32_t>& c = token_counts_.at(t);
      out.Raw(c.data(), c.size() * sizeof(uint32_t));
    }
  }

  void LoadState(StateReader& in) override {
    Check(in.U64() == predictors_.size(), in.origin(), ": ProMoE state of another model");
    for (size_t l = 0; l < predictors_.size(); ++l) {
      predictors_[l] = nullptr;
      if (in.U64() != 0) {
        ExpertPredictorMlp mlp;
        mlp.Load(in);
        Check(mlp.d() == facts_.hidden_size && mlp.experts() == facts_.num_experts &&
                  source_of_[l] >= 0,
              in.origin(), ": ProMoE predictor for layer ", l, " does not fit this model");
        predictors_[l] = std::make_shared<const ExpertPredictorMlp>(std::move(mlp));
      }
      scores_[l].train_loss = in.F64();
      scores_[l].eval.loss = in.F64();
      scores_[l].eval.accuracy = in.F64();
      scores_[l].eval.samples = in.I64();
      scores_[l].train_samples = in.I64();
    }
    const uint64_t n = in.U64();
    token_counts_.clear();
    const size_t row = moe_.layers().size() * static_cast<size_t>(facts_.num_experts);
    for (uint64_t i = 0; i < n; ++i) {
      const int64_t t = in.I64();
      std::vector<uint32_t> c(row);
      in.Raw(c.data(), c.size() * sizeof(uint32_t));
      token_counts_[static_cast<int32_t>(t)] = std::move(c);
    }
  }

  void ReportJson(nlohmann::json* report) const override {
    nlohmann::json layers = nlohmann::json::array();
    double acc = 0;
    int trained = 0;
    for (int l = 0; l < facts_.num_layers; ++l) {
      const size_t i = static_cast<size_t>(l);
      if (!Trained(l)) continue;
      layers.push_back({{"layer", l},
                        {"source_layer", source_of_[i]},
                        {"parameters", predictors_[i]->parameters()},
                        {"train_samples", scores_[i].train_samples},
                        {"train_loss", scores_[i].train_loss},
                        {"eval_samples", scores_[i].eval.samples},
                        {"eval_loss", scores_[i].eval.loss},
                        {"eval_accuracy", scores_[i].eval.accuracy}});
      acc += scores_[i].eval.accuracy;
      ++trained;
    }
    (*report)["promoe"] = {
        {"predictor", ParamText(opt_, "predictor")},
        {"distance", distance_},
        {"hidden", hidden_width_},
        {"trained_layers", trained},
        {"mean_eval_accuracy", trained ? acc / trained : 0.0},
        {"token_table_tokens", token_counts_.size()},
        {"layers", layers},
    };
  }

 private:
  struct LayerScore {
    double train_loss = 0;
    int64_t train_samples = 0;
    PredictorScore eval;
  };

  // What the simulator charges for one prediction (the engine measures): two flops per
  // parameter and token at `worker_gflops`, plus 10 µs to hand the job over. ProMoE's
  // 2M-parameter MLP then costs about 200 µs per decode token, as the paper measured.
  double InferenceCostUs(int target, int64_t n_tokens) const {
    const double params =
        kind_ == PredictorKind::kLearned
            ? static_cast<double>(predictors_[static_cast<size_t>(target)]->parameters())
            : static_cast<double>(facts_.num_experts) * facts_.hidden_size;
    return 10.0 + 2.0 * params * static_cast<double>(n_tokens) / (worker_gflops_ * 1e3);
  }

  // Equal per-layer shares of the cache, as ProMoE's per-layer LRU caches (§5.4).
  std::vector<int64_t> LayerBudgets() const {
    std::vector<int64_t> b(static_cast<size_t>(facts_.num_layers), 0);
    if (moe_.layers().empty()) return b;
    const int64_t pages = facts_.capacity_pages / static_cast<int64_t>(moe_.layers().size());
    for (int l : moe_.layers()) b[static_cast<size_t>(l)] = pages * facts_.page_bytes;
    return b;
  }

  // §5.2: the layer's routed set is known; its speculative prefetches that the gate did not
  // pick are dropped (`preempt=layer`), or every layer's outstanding ones (`all`, §5.4's
  // wording). The routed experts' queued reads were already promoted to demand.
  void EarlyPreemption(const GateEvent& e, Decisions* out) {
    if (preempt_ == Preempt::kNone) return;
    const std::span<const int32_t> routed = e.routed_experts();
    for (auto it = predicted_.begin(); it != predicted_.end();) {
      const bool this_layer = it->first == e.layer;
      if (!this_layer && preempt_ != Preempt::kAll) {
        ++it;
        continue;
      }
      for (int32_t id : it->second)
        if (!this_layer || !std::ranges::binary_search(routed, id))
          out->cancel.push_back({it->first, id});
      it = predicted_.erase(it);
    }
  }

  // Queues `picks` for `layer` behind everything queued before (one FIFO of speculative
  // tasks, as the paper's low-priority queue), most confident first.
  void Issue(int layer, const std::vector<int32_t>& picks, Decisions* out) {
    std::vector<int32_t>& mine = predicted_[layer];
    for (int32_t id : picks) {
      if (std::find(mine.begin(), mine.end(), id) != mine.end()) continue;
      Prefetch p;
      p.expert = {layer, id};
      p.priority = -static_cast<double>(issued_++);
      out->prefetch.push_back(p);
      mine.push_back(id);
    }
  }

  // Per token the top-k of the predictor's scores; their union, by summed probability
  // (experts many tokens need first), at most max_prefetch.
  // A prediction on the policy worker (PolicyWorker::Submit's snapshot form): the gate
  // input's copy and the predictor it reads, by reference counts the policy shares.
  struct Inference {
    std::shared_ptr<const ExpertPredictorMlp> mlp;  // predictor=learned
    std::shared_ptr<const RouterTable> routers;     // predictor=skip
    int target = 0;
    std::vector<float> hidden;  // [n, d]
    int64_t n = 0;
    int experts = 0, top_k = 0, d = 0, max_prefetch = 0;
  };

  // Per token the top-k of the predictor's scores; their union, by summed probability
  // (experts many tokens need first), at most max_prefetch.
  static std::vector<int32_t> Predict(const Inference& q) {
    const int E = q.experts, k = q.top_k;
    if (!q.mlp)
      return Capped(q.routers->Predict(q.target, q.hidden.data(), q.n, q.d).topk, q.max_prefetch);
    std::vector<float> scores(static_cast<size_t>(q.n) * E);
    q.mlp->Forward(q.hidden.data(), q.n, scores.data());
    std::vector<double> mass(static_cast<size_t>(E), 0);
    std::vector<char> picked(static_cast<size_t>(E), 0);
    for (int64_t i = 0; i < q.n; ++i) {
      float* row = scores.data() + i * E;
      const float top = *std::max_element(row, row + E);
      double sum = 0;
      for (int j = 0; j < E; ++j) sum += std::exp(static_cast<double>(row[j] - top));
      for (int j = 0; j < E; ++j)
        mass[static_cast<size_t>(j)] += std::exp(static_cast<double>(row[j] - top)) / sum;
      for (int32_t id : TopKIndices(row, E, k)) picked[static_cast<size_t>(id)] = 1;
    }
    return ByMass(picked, mass, q.max_prefetch);
  }

  // The picked experts, most total mass first (ties: lower id), at most max_prefetch.
  static std::vector<int32_t> ByMass(const std::vector<char>& picked,
                                     const std::vector<double>& mass, int max_prefetch) {
    std::vector<int32_t> picks;
    for (size_t j = 0; j < picked.size(); ++j)
      if (picked[j]) picks.push_back(static_cast<int32_t>(j));
    std::stable_sort(picks.begin(), picks.end(), [&](int32_t a, int32_t b) {
      return mass[static_cast<size_t>(a)] > mass[static_cast<size_t>(b)];
    });
    return Capped(std::move(picks), max_prefetch);
  }

  static std::vector<int32_t> Capped(std::vector<int32_t> picks, int max_prefetch) {
    if (max_prefetch > 0 && static_cast<int>(picks.size()) > max_prefetch)
      picks.resize(static_cast<size_t>(max_prefetch));
    return picks;
  }

  bool Trained(int layer) const {
    const auto& p = predictors_[static_cast<size_t>(layer)];
    return p && !p->empty();
  }

  // Token-based (§3.2): for each token of the pass, the experts it was most often routed
  // to at `layer` in the past; their union by summed counts.
  std::vector<int32_t> TokenPrediction(int layer) const {
    const int E = facts_.num_experts, k = facts_.top_k;
    const size_t base = MoeIndex(layer) * static_cast<size_t>(E);
    std::vector<double> mass(static_cast<size_t>(E), 0);
    std::vector<char> picked(static_cast<size_t>(E), 0);
    std::vector<float> row(static_cast<size_t>(E));
    for (int32_t t : pass_tokens_) {
      auto it = token_counts_.find(t);
      if (it == token_counts_.end()) continue;
      for (int j = 0; j < E; ++j)
        row[static_cast<size_t>(j)] = static_cast<float>(it->second[base + j]);
      if (*std::max_element(row.begin(), row.end()) == 0) continue;
      for (int j = 0; j < E; ++j) mass[static_cast<size_t>(j)] += row[static_cast<size_t>(j)];
      for (int32_t id : TopKIndices(row.data(), E, k))
        if (row[static_cast<size_t>(id)] > 0) picked[static_cast<size_t>(id)] = 1;
    }
    return ByMass(picked, mass, max_prefetch_);
  }

  // The row of a MoE layer (a gate's, or one of moe_.layers()) in the token table.
  size_t MoeIndex(int layer) const { return static_cast<size_t>(moe_.Ordinal(layer)); }

  void CountTokens(const GateEvent& e) {
    if (static_cast<int64_t>(pass_tokens_.size()) != e.n_tokens) return;
    const size_t row = moe_.layers().size() * static_cast<size_t>(facts_.num_experts);
    const size_t base = MoeIndex(e.layer) * static_cast<size_t>(facts_.num_experts);
    for (int64_t i = 0; i < e.n_tokens; ++i) {
      std::vector<uint32_t>& c = token_counts_[pass_tokens_[static_cast<size_t>(i)]];
      if (c.empty()) c.assign(row, 0);
      for (int j = 0; j < e.top_k; ++j) ++c[base + static_cast<size_t>(e.ids[i * e.top_k + j])];
    }
  }

  // A learning pass: the token table counts, the learned predictor's reservoirs sample
  // (source gate input, target routed set) pairs of the same token.
  void Learn(const GateEvent& e) {
    if (kind_ == PredictorKind::kToken) CountTokens(e);
    if (kind_ != PredictorKind::kLearned || e.hidden == nullptr || e.d != facts_.hidden_size)
      return;
    const size_t L = static_cast<size_t>(e.layer);
    if (target_of_[L] >= 0) pass_hidden_[e.layer].assign(e.hidden, e.hidden + e.n_tokens * e.d);
    const int src = source_of_[L];
    auto it = src >= 0 ? pass_hidden_.find(src) : pass_hidden_.end();
    if (it == pass_hidden_.end() || static_cast<int64_t>(it->second.size()) != e.n_tokens * e.d)
      return;
    SampleReservoir& r = reservoirs_[L];
    const int64_t d = e.d, k = e.top_k;
    for (int64_t i = 0; i < e.n_tokens; ++i) {
      int64_t slot = r.seen < sample_cap_ ? r.seen : -1;
      if (slot < 0) {
        std::uniform_int_distribution<int64_t> pick(0, r.seen);
        const int64_t j = pick(rng_);
        if (j < sample_cap_) slot = j;
      }
      ++r.seen;
      if (slot < 0) continue;
      if (slot * d >= static_cast<int64_t>(r.x.size())) {
        r.x.resize(static_cast<size_t>((slot + 1) * d));
        r.ids.resize(static_cast<size_t>((slot + 1) * k));
      }
      std::copy(it->second.begin() + i * d, it->second.begin() + (i + 1) * d,
                r.x.begin() + slot * d);
      std::copy(e.ids + i * k, e.ids + (i + 1) * k, r.ids.begin() + slot * k);
    }
  }

  // The paper's 9:1 split: train on 90 % of the target layer's samples, score on the rest.
  int64_t TrainLayer(int target) {
    SampleReservoir& r = reservoirs_[static_cast<size_t>(target)];
    const int64_t d = facts_.hidden_size, k = facts_.top_k;
    const int64_t n = static_cast<int64_t>(r.ids.size()) / std::max<int64_t>(1, k);
    if (n < 10) return 0;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 split_rng(training_.seed + static_cast<uint64_t>(target));
    std::shuffle(order.begin(), order.end(), split_rng);
    const int64_t n_eval = n / 10, n_train = n - n_eval;
    std::vector<float> xt(static_cast<size_t>(n_train * d)), xe(static_cast<size_t>(n_eval * d));
    std::vector<int32_t> it(static_cast<size_t>(n_train * k)), ie(static_cast<size_t>(n_eval * k));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = order[static_cast<size_t>(i)];
      const bool eval = i >= n_train;
      const int64_t j = eval ? i - n_train : i;
      std::copy(r.x.begin() + s * d, r.x.begin() + (s + 1) * d, (eval ? xe : xt).begin() + j * d);
      std::copy(r.ids.begin() + s * k, r.ids.begin() + (s + 1) * k,
                (eval ? ie : it).begin() + j * k);
    }
    ExpertPredictorMlp mlp(static_cast<int>(d), hidden_width_, facts_.num_experts,
                           training_.seed * 1000003 + static_cast<uint64_t>(target));
    LayerScore& s = scores_[static_cast<size_t>(target)];
    s.train_loss = mlp.Train(xt.data(), it.data(), n_train, static_cast<int>(k), training_);
    s.train_samples = n_train;
    s.eval = mlp.Evaluate(xe.data(), ie.data(), n_eval, static_cast<int>(k));
    predictors_[static_cast<size_t>(target)] =
        std::make_shared<const ExpertPredictorMlp>(std::move(mlp));
    Log(LogLevel::kInfo, "promoe: layer ", target, " predictor from layer ", source_of_[target],
        ": ", n_train, " samples, loss ", s.train_loss, ", held-out accuracy ", s.eval.accuracy);
    r = {};
    return n;
  }

  PolicyFacts facts_;
  PromoeOptions opt_;
  PredictorKind kind_;
  int distance_;
  bool prefetch_;
  Preempt preempt_;
  bool per_layer_cache_;
  int max_prefetch_;
  int64_t sample_cap_;
  double worker_gflops_;
  int hidden_width_ = 0;
  MlpTraining training_;
  std::mt19937_64 rng_;
  MoeLayers moe_;
  std::vector<int> source_of_, target_of_;      // Per layer: the MoE layer `distance` before/after.
  // Per target layer (null: none). Read-only once published: a prediction job holds its own
  // reference while learning or loading publishes a new one.
  std::vector<std::shared_ptr<const ExpertPredictorMlp>> predictors_;
  std::vector<LayerScore> scores_;
  std::vector<SampleReservoir> reservoirs_;
  std::shared_ptr<const RouterTable> routers_;                       // predictor=skip
  std::unordered_map<int32_t, std::vector<uint32_t>> token_counts_;  // [moe layer, expert]

  bool budgets_sent_ = false;
  bool warned_untrained_ = false;
  uint64_t pass_ = 0;
  uint64_t issued_ = 0;
  std::vector<int32_t> pass_tokens_;
  std::map<int, std::vector<float>> pass_hidden_;  // Learning: gate inputs of this pass.
  std::map<int, std::vector<int32_t>> predicted_;  // This pass's speculative prefetches.
  std::set<int> gated_;                            // Layers whose gate came this pass.
};

MOEX_REGISTER_POLICY({
    .name = "promoe",
    .roles = kPrefetches,
    .doc = "learned per-layer predictors from an earlier layer's gate input, stride "
           "prefetching, early preemption at each gate, per-layer LRU caches",
    .source = "ProMoE (Song et al.) §4.2-4.3, §5.1-5.4",
    .params = ParamSpecsOf<PromoeOptions>(),
    .trace_needs = kNeedsHidden,
    .test_specs = {"promoe:predictor=skip", "promoe:predictor=token,preempt=all",
                   "promoe:predictor=skip,distance=1,layer_cache=0"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<PromoePolicy>(f, p.As<PromoeOptions>());
    },
});

}  // namespace
}  // namespace moex::policy

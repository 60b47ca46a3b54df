// ExpertFlow's policy: each pass's routing path is predicted from its tokens before the pass
// runs (on the policy worker, off the forward pass); PLEC fills the one cache pool with the
// predicted experts in layer order and moves each finished layer's slots to the next layers;
// at each gate the real-time correction turns what the prediction missed into demand (the
// cache's demand fetches beat every prefetch), evicting mis-prefetched experts first, then
// experts whose computation finished, and cancels the mis-prefetches still queued.
// docs/policies/expertflow.md.
#include "policy/expertflow/expertflow.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/logging.h"
#include "core/progress.h"
#include "policy/common/token_regrouping.h"
#include "policy/policy_worker.h"

namespace moex::policy {

ExpertFlowPolicy::ExpertFlowPolicy(const PolicyFacts& f, const ExpertFlowOptions& o)
    : facts_(f),
      opt_(o),
      kind_(o.predictor),
      dim_(o.dim),
      hidden_(o.hidden),
      topk_(o.topk),
      threshold_(o.threshold),
      regroup_tokens_(o.regroup_tokens),
      regroup_(o.regroup),
      cancel_(o.cancel),
      worker_gflops_(o.worker.gflops) {
  if (topk_ == 0) topk_ = f.top_k;
  training_.epochs = o.epochs;
  training_.batch = o.batch;
  training_.learning_rate = o.lr;
  training_.weight_decay = o.wd;
  training_.seed = o.seed;
  moe_ = MoeLayers(f);
  const int L = moe_.count(), E = f.num_experts;
  plan_ = PlecPlan(L, E);
  frequency_.assign(static_cast<size_t>(L) * static_cast<size_t>(E), 0);
  const size_t keys = static_cast<size_t>(f.num_layers) * static_cast<size_t>(E);
  issued_.assign(keys, 0);
  last_use_.assign(keys, 0);
}

std::string ExpertFlowPolicy::name() const {
  const std::string nd = NonDefault(opt_);
  return nd.empty() ? "expertflow" : "expertflow:" + nd;
}

// ---- Prediction ------------------------------------------------------------------------

bool ExpertFlowPolicy::CanPredict() const {
  if (kind_ == Kind::kLearned) return !predictor_->empty();
  return std::any_of(frequency_.begin(), frequency_.end(), [](int64_t c) { return c > 0; });
}

RoutingPath ExpertFlowPolicy::FrequencyPath() const {
  const int L = moe_.count(), E = facts_.num_experts;
  std::vector<float> scores(frequency_.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = static_cast<float>(frequency_[i]);
  return TopKPath(scores.data(), L, E, topk_);
}

ExpertFlowPolicy::PathQuery ExpertFlowPolicy::Query() const {
  const bool frequency = kind_ == Kind::kFrequency;
  return {predictor_,   frequency,          frequency ? FrequencyPath() : RoutingPath(),
          moe_.count(), facts_.num_experts, topk_,
          threshold_};
}

std::vector<RoutingPath> ExpertFlowPolicy::TokenPaths(const PathQuery& q,
                                                      const std::vector<RequestContext>& contexts,
                                                      const std::vector<int32_t>& tokens,
                                                      std::vector<float>* logits_out) {
  const int L = q.layers, E = q.experts;
  std::vector<RoutingPath> paths;
  if (q.frequency) {
    paths.assign(tokens.size(), q.frequent);
    return paths;
  }
  std::vector<float> logits(tokens.size() * static_cast<size_t>(L) * static_cast<size_t>(E));
  q.predictor->Predict(contexts, tokens, logits.data());
  paths.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* z = logits.data() + i * static_cast<size_t>(L) * E;
    paths.push_back(q.threshold > 0 ? ThresholdPath(z, L, E, q.threshold)
                                    : TopKPath(z, L, E, q.topk));
  }
  if (logits_out) *logits_out = std::move(logits);
  return paths;
}

ExpertFlowPolicy::PassPaths ExpertFlowPolicy::PredictPass(const PassQuery& q) {
  PassPaths r;
  std::vector<float> logits;
  r.paths = TokenPaths(q.paths, q.contexts, q.tokens, &logits);
  // For the report, the scored tokens' paths under both binarisations too.
  const int L = q.paths.layers, E = q.paths.experts;
  const size_t width = static_cast<size_t>(L) * static_cast<size_t>(E);
  for (const auto& [row, index] : q.scored)
    if (!logits.empty())
      r.both.push_back({TopKPath(logits.data() + row * width, L, E, q.paths.topk),
                        ThresholdPath(logits.data() + row * width, L, E, 0.5)});
  return r;
}

RequestContext ExpertFlowPolicy::FreshContext(const int32_t* prompt, int64_t n) const {
  if (kind_ == Kind::kLearned && !predictor_->empty()) return predictor_->Begin(prompt, n);
  return {};
}

ExpertFlowPolicy::RequestState& ExpertFlowPolicy::State(int64_t request) {
  auto it = requests_.find(request);
  if (it == requests_.end())  // A request whose beginning this policy did not see.
    it = requests_.emplace(request, RequestState{FreshContext(nullptr, 0), 0}).first;
  return it->second;
}

RoutingPath ExpertFlowPolicy::PredictPassPath(const PassCandidate& c) const {
  const int L = moe_.count(), E = facts_.num_experts;
  RoutingPath path(L, E);
  if (!CanPredict() || c.tokens == nullptr || c.n_tokens <= 0) return path;
  auto it = requests_.find(c.request);
  RequestContext ctx = it != requests_.end() ? it->second.ctx : FreshContext(nullptr, 0);
  const int64_t n = std::min<int64_t>(c.n_tokens, regroup_tokens_);
  std::vector<RequestContext> contexts;
  std::vector<int32_t> tokens(c.tokens, c.tokens + n);
  for (int32_t t : tokens) {
    contexts.push_back(ctx);
    RoutingPathPredictor::Advance(&ctx, t);
  }
  for (const RoutingPath& p : TokenPaths(Query(), contexts, tokens)) path.OrWith(p);
  return path;
}

bool ExpertFlowPolicy::RegroupPasses(const std::vector<PassCandidate>& candidates, int groups,
                                     std::vector<int>* group) {
  if (!regroup_ || groups < 2 || !CanPredict() || group->size() != candidates.size()) return false;
  std::vector<RoutingPath> paths;
  paths.reserve(candidates.size());
  for (const PassCandidate& c : candidates) paths.push_back(PredictPassPath(c));
  RegroupOptions options;
  options.groups = groups;
  options.seed = training_.seed;
  const RegroupResult r = RegroupTokens(paths, *group, options);
  *group = r.group;
  ++regroup_units_;
  regroup_changed_ += r.changed ? 1 : 0;
  regroup_before_ += r.before;
  regroup_after_ += r.after;
  return true;
}

// ---- Events ----------------------------------------------------------------------------

void ExpertFlowPolicy::OnRequestBegin(const RequestBeginEvent& e, Decisions*) {
  if (learning()) {
    sequence_of_[e.request] = sequences_.size();
    PathSequence s;
    if (e.prompt) s.prompt.assign(e.prompt, e.prompt + e.prompt_len);
    sequences_.push_back(std::move(s));
    return;
  }
  requests_[e.request] = RequestState{FreshContext(e.prompt, e.prompt ? e.prompt_len : 0), 0};
}

void ExpertFlowPolicy::OnRequestEnd(const RequestEndEvent& e, Decisions*) {
  if (learning()) return;
  requests_.erase(e.request);
  previous_truth_.erase(e.request);
}

void ExpertFlowPolicy::OnIterationBegin(const IterationBeginEvent& e, Decisions*) {
  const int L = moe_.count(), E = facts_.num_experts;
  if (learning()) {
    pass_rows_.clear();
    int64_t at = 0;
    for (int64_t r = 0; r < e.n_requests; ++r) {
      auto it = sequence_of_.find(e.requests[r]);
      if (it == sequence_of_.end()) {  // A pass of a request that began in no trace we saw.
        it = sequence_of_.emplace(e.requests[r], sequences_.size()).first;
        sequences_.emplace_back();
      }
      PathSequence& s = sequences_[it->second];
      for (int64_t i = 0; i < e.token_counts[r]; ++i, ++at) {
        pass_rows_.push_back({it->second, s.tokens.size()});
        s.tokens.push_back(e.tokens ? e.tokens[at] : 0);
        s.paths.emplace_back(L, E);
      }
    }
    return;
  }
  gated_ = finished_ = -1;
  routed_now_.clear();
  done_now_ = 0;
  pass_scored_.clear();
  if (e.tokens == nullptr || e.n_tokens == 0) return;
  // The contexts before each token (the history advances now; the predictor runs on a copy).
  std::vector<RequestContext> contexts;
  std::vector<int32_t> tokens(e.tokens, e.tokens + e.n_tokens);
  int64_t at = 0;
  for (int64_t r = 0; r < e.n_requests; ++r) {
    RequestState& s = State(e.requests[r]);
    for (int64_t i = 0; i < e.token_counts[r]; ++i, ++at) {
      contexts.push_back(s.ctx);
      RoutingPathPredictor::Advance(&s.ctx, tokens[static_cast<size_t>(at)]);
    }
    // A decode token (a request's pass after its prefill, one token): scored for accuracy.
    if (s.passes > 0 && e.token_counts[r] == 1 && scored_.size() < kMaxScored) {
      PathSample sample;
      sample.request = e.requests[r];
      sample.step = s.passes - 1;
      sample.truth = RoutingPath(L, E);
      auto prev = previous_truth_.find(e.requests[r]);
      last_truth_.push_back(prev != previous_truth_.end() ? prev->second : RoutingPath(L, E));
      pass_scored_.push_back({static_cast<size_t>(at - 1), scored_.size()});
      scored_.push_back(std::move(sample));
      topk_scored_.emplace_back();
      threshold_scored_.emplace_back();
    }
    ++s.passes;
  }
  if (!CanPredict()) {
    if (kind_ == Kind::kLearned && !warned_untrained_)
      Log(LogLevel::kWarn,
          "expertflow: no trained routing-path predictor (learn with --learn-from, or load "
          "--policy-state); caching by recency only");
    warned_untrained_ = true;
    return;
  }
  // Inference on the policy worker; its result plans whatever is left of the pass.
  const uint64_t pass = pass_;
  const double flops =
      kind_ == Kind::kLearned
          ? 2.0 * static_cast<double>(predictor_->parameters() -
                                      static_cast<int64_t>(predictor_->vocab()) * predictor_->dim())
          : 0.0;
  const double cost_us = 10.0 + flops * static_cast<double>(tokens.size()) / (worker_gflops_ * 1e3);
  // The job reads its own reference to the predictor (learning and loading publish a new
  // one) and a copy of the counts, which the gates keep updating.
  facts_.worker->Submit(
      PassQuery{Query(), std::move(contexts), std::move(tokens), pass_scored_}, &PredictPass,
      [this, pass, scored = pass_scored_](const PassPaths& r, Decisions* d) {
        // Accuracy samples are filled whenever the prediction lands.
        for (size_t i = 0; i < scored.size(); ++i) {
          const auto [row, index] = scored[i];
          scored_[index].predicted = r.paths[row];
          if (i < r.both.size()) {
            topk_scored_[index] = r.both[i].first;
            threshold_scored_[index] = r.both[i].second;
          }
        }
        if (pass != pass_) return;  // The pass ended before its prediction came.
        StartPlan(r.paths, d);
      },
      cost_us);
}

void ExpertFlowPolicy::StartPlan(const std::vector<RoutingPath>& tokens, Decisions* out) {
  const int L = moe_.count(), E = facts_.num_experts;
  // Per layer the predicted experts, those most tokens picked first (ties: lower id).
  std::vector<std::vector<int32_t>> predicted(static_cast<size_t>(L));
  std::vector<int32_t> votes(static_cast<size_t>(E));
  for (int l = 0; l < L; ++l) {
    std::fill(votes.begin(), votes.end(), 0);
    for (const RoutingPath& p : tokens)
      for (int x = 0; x < E; ++x) votes[static_cast<size_t>(x)] += p.Test(l, x);
    std::vector<int32_t>& layer = predicted[static_cast<size_t>(l)];
    for (int x = 0; x < E; ++x)
      if (votes[static_cast<size_t>(x)] > 0) layer.push_back(x);
    std::stable_sort(layer.begin(), layer.end(), [&](int32_t a, int32_t b) {
      return votes[static_cast<size_t>(a)] > votes[static_cast<size_t>(b)];
    });
  }
  plan_.BeginPass(std::move(predicted));
  ++plans_;
  // What the pass already did before the prediction came (a late worker).
  if (finished_ >= 0) plan_.LayerDone(finished_);
  if (gated_ >= 0 && gated_ > finished_) plan_.Gate(gated_, routed_now_);
  Fill(out);
}

void ExpertFlowPolicy::Fill(Decisions* out) {
  for (const PlecPlan::Slot& s : plan_.Window(facts_.capacity_experts)) {
    const ExpertKey k{moe_.Layer(s.layer), s.expert};
    if (issued_[Key(k)]) continue;
    issued_[Key(k)] = 1;
    Prefetch p;
    p.expert = k;
    // Nearer layers first: a pass's issue order is its layer order.
    p.priority = -static_cast<double>(issue_order_++);
    out->prefetch.push_back(p);
    ++prefetches_;
  }
}

void ExpertFlowPolicy::ComputeOrder(int layer, std::vector<ExpertKey>* experts) {
  // Called before the gate's misses are inserted: from now on the layer's mis-prefetches
  // are the first victims (§3.2's correction).
  const int m = moe_.Ordinal(layer);
  if (m < 0) return;
  std::vector<int32_t> routed;
  for (const ExpertKey& k : *experts) routed.push_back(k.expert);
  std::sort(routed.begin(), routed.end());
  const std::vector<int32_t> wrong = plan_.Gate(m, routed);
  to_cancel_.insert(to_cancel_.end(), wrong.begin(), wrong.end());
}

void ExpertFlowPolicy::OnGate(const GateEvent& e, Decisions* out) {
  const int m = moe_.Ordinal(e.layer);
  if (m < 0) return;
  if (learning()) {
    Learn(e);
    return;
  }
  const int E = facts_.num_experts;
  for (int64_t i = 0; i < e.n_tokens * e.top_k; ++i)
    if (e.ids[i] >= 0 && e.ids[i] < E)
      ++frequency_[static_cast<size_t>(m) * E + static_cast<size_t>(e.ids[i])];
  for (const auto& [row, index] : pass_scored_)
    if (static_cast<int64_t>(row) < e.n_tokens)
      for (int j = 0; j < e.top_k; ++j) {
        const int32_t id = e.ids[static_cast<int64_t>(row) * e.top_k + j];
        if (id >= 0 && id < E) scored_[index].truth.Set(m, id);
      }
  const std::vector<int32_t> routed(e.routed_experts().begin(), e.routed_experts().end());
  gated_ = m;
  routed_now_ = routed;
  done_now_ = 0;
  // Without ComputeOrder (a driver that does not call it) the gate finds them here.
  const std::vector<int32_t> wrong = plan_.Gate(m, routed);
  to_cancel_.insert(to_cancel_.end(), wrong.begin(), wrong.end());
  if (cancel_)
    for (int32_t x : to_cancel_) {
      out->cancel.push_back({e.layer, x});
      ++cancels_;
    }
  to_cancel_.clear();
}

void ExpertFlowPolicy::OnExpertDone(const ExpertDoneEvent& e, Decisions* out) {
  if (learning() || e.layer < 0 || moe_.Ordinal(e.layer) != gated_ || gated_ < 0) return;
  if (!std::binary_search(routed_now_.begin(), routed_now_.end(), e.expert)) return;
  // The layer is finished when its last routed expert is: its slots go to the next layers
  // (in whatever order the experts finished, the same moment).
  if (++done_now_ < routed_now_.size()) return;
  finished_ = gated_;
  plan_.LayerDone(gated_);
  Fill(out);
}

void ExpertFlowPolicy::OnIterationEnd(Decisions*) {
  if (learning()) return;
  plan_.EndPass();
  std::fill(issued_.begin(), issued_.end(), 0);
  for (const auto& [row, index] : pass_scored_)
    previous_truth_[scored_[index].request] = scored_[index].truth;
  pass_scored_.clear();
  ++pass_;
}

void ExpertFlowPolicy::OnTouch(const ExpertKey& k, bool) {
  last_use_[Key(k)] = ++clock_;
}

double ExpertFlowPolicy::EvictScore(const ExpertKey& k) {
  const int m = moe_.Ordinal(k.layer);
  if (m < 0) return static_cast<double>(last_use_[Key(k)]);
  return plan_.Score(m, k.expert, last_use_[Key(k)]);
}

// ---- Learning --------------------------------------------------------------------------

void ExpertFlowPolicy::OnLearnBegin() {
  Policy::OnLearnBegin();
  sequences_.clear();
  sequence_of_.clear();
}

void ExpertFlowPolicy::Learn(const GateEvent& e) {
  const int m = moe_.Ordinal(e.layer), E = facts_.num_experts;
  for (int64_t i = 0; i < e.n_tokens; ++i)
    for (int j = 0; j < e.top_k; ++j) {
      const int32_t id = e.ids[i * e.top_k + j];
      if (id < 0 || id >= E) continue;
      ++frequency_[static_cast<size_t>(m) * E + static_cast<size_t>(id)];
      if (static_cast<size_t>(i) < pass_rows_.size()) {
        const auto [s, t] = pass_rows_[static_cast<size_t>(i)];
        sequences_[s].paths[t].Set(m, id);
      }
    }
}

void ExpertFlowPolicy::OnLearnEnd() {
  Policy::OnLearnEnd();
  std::vector<PathSequence> sequences = std::move(sequences_);
  sequences_.clear();
  sequence_of_.clear();
  pass_rows_.clear();
  if (kind_ != Kind::kLearned) return;
  if (sequences.empty()) {
    Log(LogLevel::kWarn, "expertflow: the learning traces had no requests; nothing learned");
    return;
  }
  // The last tenth of the requests (at least one when there are two) is held out.
  const size_t held = sequences.size() >= 2 ? std::max<size_t>(1, sequences.size() / 10) : 0;
  std::vector<PathSequence> validation(
      std::make_move_iterator(sequences.end() - static_cast<std::ptrdiff_t>(held)),
      std::make_move_iterator(sequences.end()));
  sequences.resize(sequences.size() - held);
  int32_t max_id = 0;
  train_tokens_ = validation_tokens_ = 0;
  for (const PathSequence& s : sequences) {
    for (int32_t t : s.tokens) max_id = std::max(max_id, t);
    for (int32_t t : s.prompt) max_id = std::max(max_id, t);
    train_tokens_ += static_cast<int64_t>(s.tokens.size());
  }
  for (const PathSequence& s : validation)
    validation_tokens_ += static_cast<int64_t>(s.tokens.size());
  // A row per id up to the largest seen, and one shared by every larger id. Ids past any
  // real vocabulary (a corrupt trace) share that row rather than size the table.
  if (max_id > kMaxVocab) {
    Log(LogLevel::kWarn, "expertflow: the learning traces hold token id ", max_id, "; ids above ",
        kMaxVocab, " share one embedding row");
    max_id = kMaxVocab;
  }
  RoutingPathPredictor p(max_id + 2, dim_, hidden_, moe_.count(), facts_.num_experts,
                         training_.seed);
  Progress progress("expertflow: training the routing-path predictor", 100);
  train_loss_ = p.Train(sequences, training_, [&](int64_t done, int64_t total) {
    progress.Update(total ? done * 100 / total : 100);
  });
  predictor_ = std::make_shared<const RoutingPathPredictor>(std::move(p));
  validation_loss_ = validation.empty() ? 0 : predictor_->Loss(validation);
  // Re-seat the contexts of requests already known (learning may follow serving).
  for (auto& [id, s] : requests_) s.ctx = FreshContext(nullptr, 0);
  Log(LogLevel::kInfo, "expertflow: predictor of ", predictor_->parameters(), " parameters on ",
      train_tokens_, " tokens: loss ", train_loss_, ", held-out loss ", validation_loss_, " (",
      validation_tokens_, " tokens)");
}

// ---- State and report ------------------------------------------------------------------

void ExpertFlowPolicy::SaveState(StateWriter& out) const {
  out.U64(predictor_->empty() ? 0 : 1);
  if (!predictor_->empty()) predictor_->Save(out);
  out.F64(train_loss_);
  out.F64(validation_loss_);
  out.I64(train_tokens_);
  out.I64(validation_tokens_);
  out.U64(frequency_.size());
  for (int64_t c : frequency_) out.I64(c);
}

void ExpertFlowPolicy::LoadState(StateReader& in) {
  RoutingPathPredictor p;
  const uint64_t trained = in.U64();
  Check(trained <= 1, in.origin(), ": ExpertFlow state is corrupt");
  if (trained) {
    p.Load(in);
    Check(p.layers() == moe_.count() && p.experts() == facts_.num_experts, in.origin(),
          ": ExpertFlow predictor of ", p.layers(), " x ", p.experts(), " for a model of ",
          moe_.count(), " MoE layers x ", facts_.num_experts, " experts");
  }
  const double train_loss = in.F64(), validation_loss = in.F64();
  const int64_t train_tokens = in.I64(), validation_tokens = in.I64();
  Check(in.U64() == frequency_.size(), in.origin(), ": ExpertFlow state of another shape");
  std::vector<int64_t> frequency(frequency_.size());
  for (int64_t& c : frequency) {
    c = in.I64();
    Check(c >= 0, in.origin(), ": ExpertFlow state with a negative count");
  }
  predictor_ = std::make_shared<const RoutingPathPredictor>(std::move(p));
  train_loss_ = train_loss;
  validation_loss_ = validation_loss;
  train_tokens_ = train_tokens;
  validation_tokens_ = validation_tokens;
  frequency_ = std::move(frequency);
  for (auto& [id, s] : requests_) s.ctx = FreshContext(nullptr, 0);
}

void ExpertFlowPolicy::ReportJson(nlohmann::json* report) const {
  auto accuracy = [](const std::vector<PathSample>& samples) {
    nlohmann::json table = nlohmann::json::array();
    for (int b : {1, 8, 16, 32}) {
      const BatchAccuracy a = BatchLevelAccuracy(samples, b);
      table.push_back({{"batch", b},
                       {"batches", a.batches},
                       {"jaccard", a.mean_jaccard},
                       {"precision", a.mean_precision},
                       {"recall", a.mean_recall},
                       {"exact", a.mean_exact},
                       {"jaccard_per_layer", a.jaccard}});
    }
    return table;
  };
  std::vector<PathSample> ours, topk, threshold, frequent, temporal;
  const RoutingPath freq = FrequencyPath();
  for (size_t i = 0; i < scored_.size(); ++i) {
    const PathSample& s = scored_[i];
    if (s.predicted.layers() == 0) continue;  // Never predicted (untrained).
    ours.push_back(s);
    if (topk_scored_[i].layers()) topk.push_back({s.request, s.step, topk_scored_[i], s.truth});
    if (threshold_scored_[i].layers())
      threshold.push_back({s.request, s.step, threshold_scored_[i], s.truth});
    frequent.push_back({s.request, s.step, freq, s.truth});
    temporal.push_back({s.request, s.step, last_truth_[i], s.truth});
  }
  (*report)["expertflow"] = {
      {"predictor", ParamText(opt_, "predictor")},
      {"parameters", predictor_->parameters()},
      {"bytes", predictor_->parameters() * 4},
      {"train_tokens", train_tokens_},
      {"train_loss", train_loss_},
      {"validation_tokens", validation_tokens_},
      {"validation_loss", validation_loss_},
      {"plans", plans_},
      {"prefetches", prefetches_},
      {"cancelled", cancels_},
      {"regrouping",
       {{"units", regroup_units_},
        {"changed", regroup_changed_},
        {"predicted_activated_before", regroup_before_},
        {"predicted_activated_after", regroup_after_}}},
      {"scored_decode_tokens", ours.size()},
      {"accuracy", accuracy(ours)},
      {"accuracy_topk", accuracy(topk)},
      {"accuracy_threshold_0_5", accuracy(threshold)},
      {"accuracy_most_frequent", accuracy(frequent)},
      {"accuracy_previous_token", accuracy(temporal)},
  };
}

// ---- Registration ----------------------------------------------------------------------

namespace {

MOEX_REGISTER_POLICY({
    .name = "expertflow",
    .roles = kPrefetches | kEvicts | kRegroups,
    .doc = "routing-path prediction from token ids, PLEC: one pool filled in layer order from "
           "the predicted path, real-time correction at each gate, token regrouping by the "
           "predicted paths",
    .source = "ExpertFlow (He et al.) §3.1-3.3",
    .params = ParamSpecsOf<ExpertFlowOptions>(),
    .test_specs = {"expertflow:predictor=frequency", "expertflow:predictor=frequency,cancel=0"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<ExpertFlowPolicy>(f, p.As<ExpertFlowOptions>());
    },
});

}  // namespace
}  // namespace moex::policy

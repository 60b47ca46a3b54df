// `reuse`: eviction and admission by predicted next use (issue 39; docs/policies/reuse.md).
// An expert's next use, in gates from now, is the gates until its layer's next gate (exact:
// the gate cycle) plus a whole cycle for every further gate of its layer it is expected to
// sit out (predicted: ReuseEstimator, a table learned to regress the next-use distance that
// Belady's MIN ranks by). The expert used farthest ahead is evicted; a miss predicted to be
// used later than every resident expert is not admitted (computed from staging, nothing
// evicted). A guard replays the same demand through two shadow caches, this policy's and
// LRU's, and scores by recency (LRU) while LRU's shadow has hit clearly more lately.
#include <cmath>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "policy/common/gate_cycle.h"
#include "policy/common/router_prediction.h"
#include "policy/registry.h"
#include "policy/reuse/reuse_estimator.h"
#include "policy/reuse/shadow_cache.h"

namespace moex::policy {
namespace {

struct ReuseOptions {
  ReuseEstimator::Options estimator;
  bool admission = true;
  bool guard = true;
  double guard_half_life = 32;  // Passes.
  double guard_margin = 0.02;
  int64_t nextgate_tokens = 8;  // Largest pass the next-gate feature is computed for.

  template <class V>
  void VisitParams(V& v) {
    ReuseEstimator::Options& e = estimator;
    v.Int("horizon", e.horizon, 2, 4096,
          "next-use labels clamp here (gates of the expert's layer)");
    v.Real("long_half_life", e.long_half_life, 1, 1e6,
           "half-life of the model-level routing rate (gates)");
    v.Real("short_half_life", e.short_half_life, 1, 1e6,
           "half-life of the request-level rate (gates)");
    v.Int("min_samples", e.min_samples, 1, 1e9, "samples a table cell needs before it is used");
    v.Bool("admission", admission,
           "bypass misses predicted to be used later than every cached expert");
    v.Bool("guard", guard, "score by recency while LRU's shadow cache hits clearly more");
    v.Real("guard_half_life", guard_half_life, 1, 1e6,
           "half-life of the guard's hit counts (passes)");
    v.Real("guard_margin", guard_margin, 0, 10, "LRU must hit this much more to take over");
    v.Bool("age", e.features.age, "feature: gates since the expert was last routed");
    v.Bool("rate", e.features.rate, "feature: model-level decayed routing rate");
    v.Bool("recent", e.features.recent, "feature: request-level decayed routing rate");
    v.Bool("nextgate", e.features.nextgate,
           "feature: next layer's router on this gate's input (needs gate inputs)");
    v.Int("nextgate_tokens", nextgate_tokens, 1, 1e9,
          "largest pass (tokens) the next-gate feature is computed for");
  }
};

class ReuseEvictor : public Policy {
 public:
  ReuseEvictor(const PolicyFacts& f, const ReuseOptions& o)
      : facts_(f),
        o_(o),
        cycle_(f.moe_layer),
        estimator_(f.num_layers, f.num_experts, f.top_k, o.estimator),
        touched_(static_cast<size_t>(f.num_layers) * f.num_experts, 0),
        prefetched_(touched_.size(), 0),
        shadow_lru_touch_(touched_.size(), 0),
        shadow_self_(f.num_layers, f.num_experts, f.capacity_experts),
        shadow_lru_(f.num_layers, f.num_experts, f.capacity_experts) {
    guard_decay_ = std::exp2(-1.0 / (o.guard_half_life * cycle_.size()));
    if (o.estimator.features.nextgate) {
      if (f.router_weights) {
        routers_.emplace(f, "reuse");
      } else {
        missing_.insert("nextgate: no router weights (trace recorded without them)");
      }
    }
  }
  std::string name() const override { return "reuse"; }
  bool evicts() const override { return true; }
  bool decides_admission() const override { return o_.admission; }

  void OnLearnEnd() override {
    Policy::OnLearnEnd();
    estimator_.ResetRun();  // Keep what was learned, not the learning run's ages.
    cycle_.EndPass();
  }

  void OnIterationBegin(const IterationBeginEvent&, Decisions*) override { cycle_.BeginPass(); }
  void OnIterationEnd(Decisions*) override { cycle_.EndPass(); }

  void OnGate(const GateEvent& e, Decisions*) override {
    if (!learning() && o_.guard) Guard(e);
    estimator_.ObserveGate(e.layer, e.ids, e.n_tokens * e.top_k);
    for (int x = 0; x < facts_.num_experts; ++x) prefetched_[Index({e.layer, x})] = 0;
    PredictNextGate(e);
    cycle_.AfterGate(e.layer);
  }

  void OnTouch(const ExpertKey& k, bool demand) override {
    touched_[Index(k)] = ++clock_;
    if (!demand) prefetched_[Index(k)] = 1;  // Predicted for its layer's next gate.
  }
  NeuronRange KeepOnMiss(const ExpertKey& k) override {
    cycle_.ServingGate(k.layer);
    return {};
  }

  // Farther predicted next use = lower; equal predictions: the older touch first.
  double EvictScore(const ExpertKey& k) override {
    if (fallback_) return static_cast<double>(touched_[Index(k)]);
    return Score(k, /*use_prefetch=*/true);
  }
  bool Admit(const ExpertKey& k, double lowest) override {
    return fallback_ || AdmitScore(k) >= lowest;
  }

  void SaveState(StateWriter& out) const override { estimator_.Save(out); }
  void LoadState(StateReader& in) override { estimator_.Load(in); }

  void ReportJson(nlohmann::json* report) const override {
    nlohmann::json j = estimator_.Report();
    nlohmann::json used = nlohmann::json::array();
    const ReuseFeatures& f = o_.estimator.features;
    if (f.age) used.push_back("age");
    if (f.rate) used.push_back("rate");
    if (f.recent) used.push_back("recent");
    if (f.nextgate && routers_ && saw_hidden_) used.push_back("nextgate");
    j["features"] = used;
    j["missing"] = nlohmann::json(std::vector<std::string>(missing_.begin(), missing_.end()));
    j["admission"] = o_.admission;
    j["guard"] = o_.guard;
    j["fallback_share"] = gates_ > 0 ? static_cast<double>(fallback_gates_) / gates_ : 0.0;
    j["shadow_hits"] = {{"reuse", shadow_hits_self_}, {"lru", shadow_hits_lru_}};
    (*report)["reuse"] = j;
  }

 private:
  size_t Index(const ExpertKey& k) const { return KeyIndex(k, facts_.num_experts); }
  double Tie(uint64_t touch) const { return 1e-12 * static_cast<double>(touch); }
  // -(predicted gates until next use), for a candidate of the cache.
  double Score(const ExpertKey& k, bool use_prefetch) const {
    const size_t i = Index(k);
    using When = ReuseEstimator::When;
    const When when = cycle_.Serving(k.layer) ? When::kAfterMiss : When::kNow;
    const double e = use_prefetch && prefetched_[i] ? 1.0 : estimator_.ExpectedGates(k, when);
    return -(cycle_.GatesUntil(k.layer) + cycle_.size() * (e - 1)) + Tie(touched_[i]);
  }
  // The same for a miss of the gate being served, as if it were cached now.
  double AdmitScore(const ExpertKey& k) const {
    const double e = estimator_.ExpectedGates(k, ReuseEstimator::When::kAfterRoute);
    return -(cycle_.GatesUntil(k.layer) + cycle_.size() * (e - 1)) + Tie(clock_ + 1);
  }

  void PredictNextGate(const GateEvent& e) {
    if (!routers_) return;
    if (e.hidden == nullptr) {
      if (missing_
              .insert("nextgate: gates without gate inputs (a trace recorded without "
                      "--hidden)")
              .second)
        Log(LogLevel::kWarn,
            "policy reuse: the gates carry no gate inputs; the nextgate feature is off");
      return;
    }
    saw_hidden_ = true;
    const int next = facts_.NextMoeLayer(e.layer);
    // A pass of many tokens (a prefill) routes most experts of the next layer anyway: its
    // prediction would say little and cost a router product per token.
    if (next < 0 || e.n_tokens > o_.nextgate_tokens) return;
    estimator_.SetPredicted(next, routers_->Predict(next, e.hidden, e.n_tokens, e.d).topk);
  }

  // Replays this gate's demand through both shadows (as the real cache does, before the
  // gate's OnGate) and chooses the scoring for what follows.
  void Guard(const GateEvent& e) {
    std::vector<ExpertKey> routed;
    for (int32_t id : e.routed_experts()) routed.push_back({e.layer, id});
    cycle_.ServingGate(e.layer);
    const int64_t self = shadow_self_.Serve(
        routed, [&](const ExpertKey& k) { return Score(k, false); },
        o_.admission ? ShadowCache::Admitter([&](const ExpertKey& k, double lowest) {
          return AdmitScore(k) >= lowest;
        })
                     : ShadowCache::Admitter());
    const int64_t lru = shadow_lru_.Serve(
        routed,
        [&](const ExpertKey& k) { return static_cast<double>(shadow_lru_touch_[Index(k)]); },
        nullptr);
    for (const ExpertKey& k : routed) shadow_lru_touch_[Index(k)] = ++shadow_clock_;
    shadow_hits_self_ += self;
    shadow_hits_lru_ += lru;
    recent_self_ = recent_self_ * guard_decay_ + static_cast<double>(self);
    recent_lru_ = recent_lru_ * guard_decay_ + static_cast<double>(lru);
    // Hysteresis: fall back on a clear loss, return once even.
    if (!fallback_ && recent_lru_ > recent_self_ * (1 + o_.guard_margin) + 1) fallback_ = true;
    if (fallback_ && recent_self_ >= recent_lru_) fallback_ = false;
    ++gates_;
    fallback_gates_ += fallback_;
  }

  PolicyFacts facts_;
  ReuseOptions o_;
  GateCycle cycle_;
  ReuseEstimator estimator_;
  std::optional<RouterTable> routers_;
  bool saw_hidden_ = false;
  std::set<std::string> missing_;
  uint64_t clock_ = 0;
  std::vector<uint64_t> touched_;  // Per expert: clock_ at its last touch (demand or prefetch).
  std::vector<char> prefetched_;   // Per expert: prefetched since its layer's last gate.
  // The guard.
  std::vector<uint64_t> shadow_lru_touch_;
  uint64_t shadow_clock_ = 0;
  ShadowCache shadow_self_, shadow_lru_;
  double guard_decay_ = 1, recent_self_ = 0, recent_lru_ = 0;
  bool fallback_ = false;
  int64_t gates_ = 0, fallback_gates_ = 0, shadow_hits_self_ = 0, shadow_hits_lru_ = 0;
};

MOEX_REGISTER_POLICY({
    .name = "reuse",
    .roles = kEvicts,
    .doc = "evict (or do not admit) the expert whose predicted next use is farthest: its "
           "layer's place in the gate cycle plus a learned next-use estimate",
    .source = "issue 39: reuse-distance prediction (after Mockingjay, LRB) on the gate cycle",
    .params = ParamSpecsOf<ReuseOptions>(),
    .trace_uses = kNeedsHidden,  // Its nextgate feature.
    .test_specs = {"nextgate+reuse", "reuse:admission=false,guard=false"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<ReuseEvictor>(f, p.As<ReuseOptions>());
    },
});

}  // namespace
}  // namespace moex::policy

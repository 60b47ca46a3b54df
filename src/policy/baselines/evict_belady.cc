// Belady's MIN: evict the expert whose next use lies farthest in the future (never used
// again: first). With equal-sized experts and demand fetching this minimises misses, so it
// is the upper bound on hit rate every simulator report shows. It needs the future, which
// only the trace-replay simulator has (PolicyFacts::future).
#include <algorithm>
#include <limits>
#include <vector>

#include "core/error.h"
#include "policy/registry.h"

namespace moex::policy {
namespace {

struct BeladyOptions {
  bool bypass = false;

  template <class V>
  void VisitParams(V& v) {
    v.Bool("bypass", bypass,
           "do not insert a miss used again later than every cached expert (MIN when the "
           "cache may bypass: the bound for admission policies)");
  }
};

class BeladyEvictor : public Policy {
 public:
  BeladyEvictor(const PolicyFacts& ctx, bool bypass) : experts_(ctx.num_experts), bypass_(bypass) {
    Check(ctx.future != nullptr,
          "policy belady needs the future demand, which only `moex sim` has (it replays a "
          "recorded trace); the engine cannot run it");
    const size_t keys = static_cast<size_t>(ctx.num_layers) * static_cast<size_t>(experts_);
    uses_.resize(keys);
    next_.assign(keys, 0);
    const auto& gates = ctx.future->gates;
    for (size_t g = 0; g < gates.size(); ++g)
      for (const ExpertKey& k : gates[g]) uses_[Index(k)].push_back(static_cast<int64_t>(g));
  }
  std::string name() const override { return "belady"; }
  bool evicts() const override { return true; }
  // With bypass, a miss used again later than every cached expert is not inserted: MIN
  // for a cache that may bypass, the bound for policies that decide admission.
  bool decides_admission() const override { return bypass_; }
  bool Admit(const ExpertKey& k, double lowest) override {
    const std::vector<int64_t>& uses = uses_[Index(k)];
    // Its next use after the gate being served (number cursor_).
    const auto next = std::upper_bound(uses.begin(), uses.end(), cursor_);
    const double score =
        next == uses.end() ? -std::numeric_limits<double>::infinity() : -static_cast<double>(*next);
    return score >= lowest;
  }
  void OnGate(const GateEvent&, Decisions*) override { ++cursor_; }
  // A learning replay is another stream: its gates are not this replay's.
  void OnLearnBegin() override {
    Policy::OnLearnBegin();
    saved_cursor_ = cursor_;
  }
  void OnLearnEnd() override {
    Policy::OnLearnEnd();
    cursor_ = saved_cursor_;
  }

  // Called during gate number `cursor_` (before its OnGate): that gate's experts are pinned,
  // so every candidate's next use is at or after it. Farther next use = lower score.
  double EvictScore(const ExpertKey& k) override {
    const size_t i = Index(k);
    const std::vector<int64_t>& uses = uses_[i];
    size_t& n = next_[i];
    while (n < uses.size() && uses[n] < cursor_) ++n;  // The cursor only moves forward.
    if (n == uses.size()) return -std::numeric_limits<double>::infinity();
    return -static_cast<double>(uses[n]);
  }

 private:
  size_t Index(const ExpertKey& k) const { return KeyIndex(k, experts_); }
  int experts_;
  bool bypass_;
  std::vector<std::vector<int64_t>> uses_;  // Per expert: gate indices that route to it.
  std::vector<size_t> next_;                // Per expert: first use not yet passed.
  int64_t cursor_ = 0;                      // Gate events seen so far.
  int64_t saved_cursor_ = 0;
};

MOEX_REGISTER_POLICY({
    .name = "belady",
    .roles = kEvicts,
    .doc = "Belady's MIN: evict the expert whose next use is farthest (needs the future)",
    .source = "Belady 1966; the bound for eviction",
    .params = ParamSpecsOf<BeladyOptions>(),
    .needs_future = true,
    .test_specs = {"belady:bypass=true"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<BeladyEvictor>(f, p.As<BeladyOptions>().bypass);
    },
});

}  // namespace
}  // namespace moex::policy

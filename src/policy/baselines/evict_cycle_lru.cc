// LRU on the gate cycle: the layer-aware recency baseline beside `reuse` (issue 39). An
// expert's next use is projected as LRU assumes (reused as soon as it was last reused:
// `age` of its layer's gates since it was routed), but placed on the fixed cycle of MoE
// gates: next use = gates until its layer's next gate + cycle length x age. A global LRU
// instead evicts the experts of the layers that run next; this one evicts those whose layer
// just ran. How much of `reuse`'s gain the cycle alone gives is this policy's.
#include <algorithm>
#include <vector>

#include "policy/common/gate_cycle.h"
#include "policy/registry.h"

namespace moex::policy {
namespace {

class CycleLruEvictor : public Policy {
 public:
  explicit CycleLruEvictor(const PolicyFacts& f)
      : experts_(f.num_experts),
        cycle_(f.moe_layer),
        gates_seen_(static_cast<size_t>(f.num_layers), 0),
        last_(static_cast<size_t>(f.num_layers) * f.num_experts, -1),
        prefetched_(last_.size(), 0) {}
  std::string name() const override { return "cycle-lru"; }
  bool evicts() const override { return true; }

  // A learning replay is another run: its ages are not this one's.
  void OnLearnEnd() override {
    Policy::OnLearnEnd();
    std::fill(gates_seen_.begin(), gates_seen_.end(), 0);
    std::fill(last_.begin(), last_.end(), -1);
    std::fill(prefetched_.begin(), prefetched_.end(), 0);
    cycle_.EndPass();
  }
  void OnIterationBegin(const IterationBeginEvent&, Decisions*) override { cycle_.BeginPass(); }
  void OnIterationEnd(Decisions*) override { cycle_.EndPass(); }
  void OnGate(const GateEvent& e, Decisions*) override {
    const int64_t now = ++gates_seen_[static_cast<size_t>(e.layer)];
    for (int x = 0; x < experts_; ++x) prefetched_[Index({e.layer, x})] = 0;
    for (int64_t i = 0; i < e.n_tokens * e.top_k; ++i) last_[Index({e.layer, e.ids[i]})] = now;
    cycle_.AfterGate(e.layer);
  }
  // A prefetch is a prediction of use at the layer's next gate: age 0 until that gate.
  void OnTouch(const ExpertKey& k, bool demand) override {
    if (!demand) prefetched_[Index(k)] = 1;
  }
  NeuronRange KeepOnMiss(const ExpertKey& k) override {
    cycle_.ServingGate(k.layer);
    return {};
  }
  // Farther projected next use = lower score.
  double EvictScore(const ExpertKey& k) override {
    const size_t i = Index(k);
    const int64_t seen = gates_seen_[static_cast<size_t>(k.layer)];
    // Never routed: as old as the run (ties: lower key, the cache's order).
    const int64_t age = prefetched_[i] ? 0 : last_[i] < 0 ? seen + 1 : seen - last_[i];
    return -static_cast<double>(cycle_.GatesUntil(k.layer) +
                                static_cast<int64_t>(cycle_.size()) * age);
  }

 private:
  size_t Index(const ExpertKey& k) const { return KeyIndex(k, experts_); }
  int experts_;
  GateCycle cycle_;
  std::vector<int64_t> gates_seen_;  // Per decoder layer: its gates so far.
  std::vector<int64_t> last_;        // Per expert: gates_seen_ of its layer when last routed.
  std::vector<char> prefetched_;     // Per expert: prefetched since its layer's last gate.
};

MOEX_REGISTER_POLICY({
    .name = "cycle-lru",
    .roles = kEvicts,
    .doc = "LRU placed on the gate cycle: evict the expert whose layer's next gate, pushed "
           "back a cycle per gate it was not routed at, is farthest",
    .source = "layer-aware recency baseline (issue 39)",
    .test_specs = {"nextgate+cycle-lru"},
    .make = [](const PolicyFacts& f, const Params&) -> std::unique_ptr<Policy> {
      return std::make_unique<CycleLruEvictor>(f);
    },
});

}  // namespace
}  // namespace moex::policy

// Next-layer gate speculation (MoEpic, also ProMoE's and ExpertFlow's baseline): layer l's
// gate input is fed to layer l+1's router; its per-token top-k are prefetched, highest
// score first. When layer l+1's real gate arrives, predictions it did not route to are
// cancelled (early preemption), so their queued chunks stop using the link.
#include <algorithm>
#include <map>
#include <vector>

#include "policy/common/router_prediction.h"
#include "policy/registry.h"

namespace moex::policy {
namespace {

class NextGatePrefetcher : public Policy {
 public:
  explicit NextGatePrefetcher(const PolicyFacts& f) : facts_(f), routers_(f, "nextgate") {}
  std::string name() const override { return "nextgate"; }

  void OnGate(const GateEvent& e, Decisions* out) override {
    if (learning()) return;  // Nothing to learn: skip the router products of a past trace.
    // Early preemption: drop this layer's predictions that the real gate did not pick.
    auto it = predicted_.find(e.layer);
    if (it != predicted_.end()) {
      for (int32_t id : it->second)
        if (!std::ranges::binary_search(e.routed_experts(), id))
          out->cancel.push_back({e.layer, id});
      predicted_.erase(it);
    }
    const int next = facts_.NextMoeLayer(e.layer);
    if (next < 0 || e.hidden == nullptr) return;
    // The per-token top-k of the next router, most confident first.
    const std::vector<int32_t> picks = routers_.Predict(next, e.hidden, e.n_tokens, e.d).topk;
    for (size_t i = 0; i < picks.size(); ++i) {
      Prefetch p;
      p.expert = {next, picks[i]};
      p.priority = -static_cast<double>(i);  // Most confident first.
      out->prefetch.push_back(p);
    }
    predicted_[next] = picks;
  }

  void OnIterationEnd(Decisions*) override { predicted_.clear(); }

 private:
  PolicyFacts facts_;
  RouterTable routers_;
  std::map<int, std::vector<int32_t>> predicted_;
};

MOEX_REGISTER_POLICY({
    .name = "nextgate",
    .roles = kPrefetches,
    .doc = "feed layer l's gate input to layer l+1's router and prefetch its top-k; cancel "
           "the predictions the real gate did not pick",
    .source = "next-layer gate speculation (MoEpic, ProMoE and ExpertFlow baselines)",
    .trace_needs = kNeedsRouterWeights | kNeedsHidden,
    .test_specs = {"nextgate+lfu"},
    .make = [](const PolicyFacts& f, const Params&) -> std::unique_ptr<Policy> {
      return std::make_unique<NextGatePrefetcher>(f);
    },
});

}  // namespace
}  // namespace moex::policy

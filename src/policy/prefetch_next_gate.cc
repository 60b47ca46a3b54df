// Next-layer gate speculation (MoEpic, also ProMoE's and ExpertFlow's baseline): layer l's
// gate input is fed to layer l+1's router; its per-token top-k are prefetched, highest
// score first. When layer l+1's real gate arrives, predictions it did not route to are
// cancelled (early preemption), so their queued chunks stop using the link.
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "policy/registry.h"

namespace moex::policy {
namespace {

class NextGatePrefetcher : public Policy {
 public:
  explicit NextGatePrefetcher(const PolicyFacts& f) : facts_(f) {
    Check(f.router_weights != nullptr, "policy nextgate needs the model's router weights");
    routers_.resize(static_cast<size_t>(f.num_layers));
    for (int l = 0; l < f.num_layers; ++l) {
      if (!f.IsMoeLayer(l)) continue;
      routers_[static_cast<size_t>(l)] = f.router_weights(l);
      Check(routers_[static_cast<size_t>(l)].size() ==
                static_cast<size_t>(f.num_experts) * static_cast<size_t>(f.hidden_size),
            "policy nextgate: router of layer ", l, " has the wrong shape");
    }
  }
  std::string name() const override { return "nextgate"; }

  // Nothing to learn: skip the router products while a past trace is replayed.
  void OnLearnBegin() override { learning_ = true; }
  void OnLearnEnd() override { learning_ = false; }

  void OnGate(const GateEvent& e, Decisions* out) override {
    if (learning_) return;
    // Early preemption: drop this layer's predictions that the real gate did not pick.
    auto it = predicted_.find(e.layer);
    if (it != predicted_.end()) {
      std::set<int32_t> routed(e.ids, e.ids + e.n_tokens * e.top_k);
      for (int32_t id : it->second)
        if (!routed.count(id)) out->cancel.push_back({e.layer, id});
      predicted_.erase(it);
    }
    const int next = facts_.NextMoeLayer(e.layer);
    if (next < 0 || e.hidden == nullptr) return;
    Check(e.d == facts_.hidden_size, "policy nextgate: gate input of width ", e.d,
          " where the routers take ", facts_.hidden_size);
    const std::vector<float>& w = routers_[static_cast<size_t>(next)];
    const int E = facts_.num_experts;
    const int k = facts_.top_k;
    std::vector<float> best(static_cast<size_t>(E), -1e30f);  // Max logit over tokens.
    std::vector<float> logits(static_cast<size_t>(E));
    std::vector<int32_t> order(static_cast<size_t>(E));
    std::vector<char> chosen(static_cast<size_t>(E), 0);
    for (int64_t t = 0; t < e.n_tokens; ++t) {
      const float* h = e.hidden + t * e.d;
      for (int x = 0; x < E; ++x) {
        const float* row = &w[static_cast<size_t>(x) * static_cast<size_t>(e.d)];
        float s = 0;
        for (int64_t j = 0; j < e.d; ++j) s += row[j] * h[j];
        logits[static_cast<size_t>(x)] = s;
      }
      for (int x = 0; x < E; ++x) order[static_cast<size_t>(x)] = x;
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
               (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
      });
      for (int i = 0; i < k; ++i) {
        const size_t x = static_cast<size_t>(order[static_cast<size_t>(i)]);
        chosen[x] = 1;
        best[x] = std::max(best[x], logits[x]);
      }
    }
    std::vector<int32_t> picks;
    for (int x = 0; x < E; ++x)
      if (chosen[static_cast<size_t>(x)]) picks.push_back(x);
    std::stable_sort(picks.begin(), picks.end(), [&](int32_t a, int32_t b) {
      return best[static_cast<size_t>(a)] > best[static_cast<size_t>(b)];
    });
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
  bool learning_ = false;
  std::vector<std::vector<float>> routers_;  // Per layer [E, d] f32 (empty for dense).
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

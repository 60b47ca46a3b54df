// `lastpath`: token regrouping (ExpertFlow §3.3) by the routing path each request's previous
// pass took. A request's next token is predicted to route as its last token did (decode
// steps of one request reuse experts), a prefill chunk as its previous chunk did (the OR of
// its tokens); the server's units are then regrouped by those paths with the balanced
// clustering of policy/token_regrouping.h, which keeps the scheduler's split unless Eq. 5
// drops. It needs nothing but the event stream, so it runs at serve time; it stands in for
// ExpertFlow's learned routing-path predictor until that predictor regroups, and is what the
// serving measurements of docs/serving.md regroup with. A request with no pass yet has an
// empty path. It neither prefetches nor evicts: compose it before an evictor (lastpath+lru).
#include <map>
#include <vector>

#include "policy/registry.h"
#include "policy/token_regrouping.h"

namespace moex::policy {
namespace {

class LastPathRegrouper : public Policy {
 public:
  LastPathRegrouper(const PolicyFacts& f, const Params& p)
      : layers_(f.num_layers), experts_(f.num_experts) {
    options_.seed = static_cast<uint64_t>(p.Int("seed"));
    options_.restarts = static_cast<int>(p.Int("restarts"));
  }
  std::string name() const override { return "lastpath"; }

  void OnLearnBegin() override { learning_ = true; }
  void OnLearnEnd() override { learning_ = false; }

  // The pass's tokens are request after request: remember whose each token is.
  void OnIterationBegin(const IterationBeginEvent& e, Decisions*) override {
    owner_.clear();
    last_token_.clear();
    if (learning_) return;
    for (int64_t r = 0; r < e.n_requests; ++r) {
      Paths& p = paths_[e.requests[r]];
      p.chunk = p.last = RoutingPath(layers_, experts_);
      if (e.token_counts[r] > 0)
        last_token_.push_back(static_cast<int64_t>(owner_.size()) + e.token_counts[r] - 1);
      owner_.insert(owner_.end(), static_cast<size_t>(e.token_counts[r]), e.requests[r]);
    }
  }

  void OnGate(const GateEvent& e, Decisions*) override {
    if (learning_ || e.n_tokens != static_cast<int64_t>(owner_.size())) return;
    size_t next_last = 0;
    for (int64_t t = 0; t < e.n_tokens; ++t) {
      Paths& p = paths_[owner_[static_cast<size_t>(t)]];
      const bool last = next_last < last_token_.size() && last_token_[next_last] == t;
      for (int k = 0; k < e.top_k; ++k) {
        const int32_t expert = e.ids[t * e.top_k + k];
        if (expert < 0 || expert >= experts_) continue;
        p.chunk.Set(e.layer, expert);
        if (last) p.last.Set(e.layer, expert);
      }
      if (last) ++next_last;
    }
  }

  void OnRequestEnd(const RequestEndEvent& e, Decisions*) override { paths_.erase(e.request); }

  bool RegroupPasses(const std::vector<PassCandidate>& candidates, int groups,
                     std::vector<int>* group) override {
    if (groups < 2 || group->size() != candidates.size()) return false;
    std::vector<RoutingPath> predicted;
    predicted.reserve(candidates.size());
    for (const PassCandidate& c : candidates) {
      auto it = paths_.find(c.request);
      if (it == paths_.end())
        predicted.emplace_back(layers_, experts_);
      else
        predicted.push_back(c.n_tokens > 1 ? it->second.chunk : it->second.last);
    }
    RegroupOptions o = options_;
    o.groups = groups;
    *group = RegroupTokens(predicted, *group, o).group;
    return true;
  }

 private:
  struct Paths {
    RoutingPath chunk;  // OR over the request's tokens of its last pass.
    RoutingPath last;   // Its last token's path.
  };
  int layers_, experts_;
  RegroupOptions options_;
  bool learning_ = false;
  std::map<int64_t, Paths> paths_;   // By request.
  std::vector<int64_t> owner_;       // The request of each token of the current pass.
  std::vector<int64_t> last_token_;  // Index of each request's last token in the pass.
};

MOEX_REGISTER_POLICY({
    .name = "lastpath",
    .roles = kRegroups,
    .doc = "regroup the server's units (--regroup N) by each request's last routing path, "
           "with ExpertFlow's balanced clustering; prefetches and evicts nothing",
    .source = "ExpertFlow §3.3 token scheduler, with the previous step's path as predictor",
    .params = {{.name = "seed",
                .type = ParamType::kInt,
                .default_value = "0",
                .min = 0,
                .max = 1e9,
                .doc = "initial medoids of the clustering"},
               {.name = "restarts",
                .type = ParamType::kInt,
                .default_value = "4",
                .min = 1,
                .max = 64,
                .doc = "clusterings from different medoids; the best is kept"}},
    .test_specs = {"lastpath+lfu"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<LastPathRegrouper>(f, p);
    },
});

}  // namespace
}  // namespace moex::policy

// `regroup`: token regrouping (ExpertFlow §3.3) by each request's predicted routing path,
// with the balanced clustering of policy/common/token_regrouping.h (which keeps the scheduler's
// split unless Eq. 5 drops). Two path sources, both from the event stream alone:
//
// - the last path: a request's next token is predicted to route as its last token did
//   (decode steps of one request reuse experts), a prefill chunk as its previous chunk did
//   (the OR of its tokens); a request's first chunk of several tokens is predicted to touch
//   every expert (it touches most), a lone first token nothing. This runs at serve
//   time and stands in for ExpertFlow's learned predictor until that predictor regroups.
// - recorded paths: every pass's path is recorded under (the request's prompt, its position),
//   and saved with --policy-state. A later run that loads the state and meets the same prompt
//   at the same position uses the recorded path instead. The kernels are batch-invariant and
//   prompts are chunked at fixed offsets, so when an identical workload is replayed (greedy,
//   same prompts) these are exactly the paths the passes will take: ORACLE paths, a bound for
//   measurements, not a predictor (they need the run to have happened already). When every
//   request of a unit has a recorded path, the report also scores, on those true paths, the
//   admission-order split, the last-path clustering's split and the recorded one's: a paired
//   comparison on the same unit, whatever the timing of the run.
//
// It neither prefetches nor evicts: compose it before an evictor (regroup+lru).
#include <map>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy/common/token_regrouping.h"
#include "policy/registry.h"

namespace moex::policy {
namespace {

// (FNV-1a of the prompt's tokens, tokens of the request before the pass).
struct PathKey {
  uint64_t prompt = 0;
  int64_t position = 0;
  bool operator==(const PathKey&) const = default;
};
struct PathKeyHash {
  size_t operator()(const PathKey& k) const {
    return static_cast<size_t>(k.prompt ^ (static_cast<uint64_t>(k.position) * 0x9e3779b97f4a7c15));
  }
};

uint64_t PromptHash(const int32_t* tokens, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]);
    h *= 1099511628211ull;
  }
  return h ^ static_cast<uint64_t>(n);
}

// The clustering's settings a spec may change (the rest are RegroupOptions' defaults).
struct PathRegrouperOptions {
  RegroupOptions clustering;

  template <class V>
  void VisitParams(V& v) {
    v.Int("seed", clustering.seed, 0, 1e9, "initial medoids of the clustering");
    v.Int("restarts", clustering.restarts, 1, 64,
          "clusterings from different medoids; the best is kept");
  }
};

class PathRegrouper : public Policy {
 public:
  PathRegrouper(const PolicyFacts& f, const PathRegrouperOptions& o)
      : layers_(f.num_layers), experts_(f.num_experts), every_expert_(layers_, experts_) {
    options_.seed = o.clustering.seed;
    options_.restarts = o.clustering.restarts;
    for (int l = 0; l < layers_; ++l)
      if (f.IsMoeLayer(l))
        for (int e = 0; e < experts_; ++e) every_expert_.Set(l, e);
  }
  std::string name() const override { return "regroup"; }

  void OnRequestBegin(const RequestBeginEvent& e, Decisions*) override {
    if (learning()) return;
    Request& r = requests_[e.request];
    r.prompt = PromptHash(e.prompt, e.prompt_len);
    r.chunk = r.last = RoutingPath(layers_, experts_);  // No pass yet: an empty path.
  }

  // The pass's tokens are request after request: remember whose each token is.
  void OnIterationBegin(const IterationBeginEvent& e, Decisions*) override {
    owner_.clear();
    last_token_.clear();
    if (learning()) return;
    for (int64_t i = 0; i < e.n_requests; ++i) {
      Request& r = requests_[e.requests[i]];
      r.chunk = r.last = RoutingPath(layers_, experts_);
      r.pass_position = r.position;
      r.position += e.token_counts[i];
      if (e.token_counts[i] > 0)
        last_token_.push_back(static_cast<int64_t>(owner_.size()) + e.token_counts[i] - 1);
      owner_.insert(owner_.end(), static_cast<size_t>(e.token_counts[i]), e.requests[i]);
    }
  }

  void OnGate(const GateEvent& e, Decisions*) override {
    if (learning() || e.n_tokens != static_cast<int64_t>(owner_.size())) return;
    size_t next_last = 0;
    for (int64_t t = 0; t < e.n_tokens; ++t) {
      Request& r = requests_[owner_[static_cast<size_t>(t)]];
      const bool last = next_last < last_token_.size() && last_token_[next_last] == t;
      for (int k = 0; k < e.top_k; ++k) {
        const int32_t expert = e.ids[t * e.top_k + k];
        if (expert < 0 || expert >= experts_) continue;
        r.chunk.Set(e.layer, expert);
        if (last) r.last.Set(e.layer, expert);
      }
      if (last) ++next_last;
    }
  }

  void OnIterationEnd(Decisions*) override {
    if (learning()) return;
    std::vector<int64_t> seen;
    for (int64_t id : owner_) {
      if (!seen.empty() && seen.back() == id) continue;
      seen.push_back(id);
      const Request& r = requests_[id];
      recorded_.insert_or_assign(PathKey{r.prompt, r.pass_position}, r.chunk);
    }
  }

  void OnRequestEnd(const RequestEndEvent& e, Decisions*) override { requests_.erase(e.request); }

  bool RegroupPasses(const std::vector<PassCandidate>& candidates, int groups,
                     std::vector<int>* group) override {
    if (groups < 2 || group->size() != candidates.size()) return false;
    // Each candidate's last path, and its recorded path when an earlier run recorded it.
    std::vector<RoutingPath> last, predicted;
    bool all_recorded = true;
    for (const PassCandidate& c : candidates) {
      auto it = requests_.find(c.request);
      if (it == requests_.end()) it = requests_.emplace(c.request, Request{}).first;
      Request& r = it->second;
      if (r.chunk.layers() == 0) r.chunk = r.last = RoutingPath(layers_, experts_);
      // A first prompt chunk has nothing to go by; several tokens touch most experts, so it
      // is predicted to touch all (an empty path would look like the sparsest decode).
      if (r.position == 0 && c.n_tokens > 1)
        last.push_back(every_expert_);
      else
        last.push_back(c.n_tokens > 1 ? r.chunk : r.last);
      if (auto rec = recorded_.find(PathKey{r.prompt, r.position}); rec != recorded_.end()) {
        predicted.push_back(rec->second);
        ++recorded_used_;
      } else {
        predicted.push_back(last.back());
        all_recorded = false;
        ++last_used_;
      }
    }
    RegroupOptions o = options_;
    o.groups = groups;
    const std::vector<int> input = *group;
    const RegroupResult result = RegroupTokens(predicted, input, o);
    *group = result.group;
    predicted_before_ += result.before;
    predicted_after_ += result.after;
    if (all_recorded) {
      // The recorded paths are the ones the passes take: score the admission-order split,
      // the last-path clustering's and the recorded-path clustering's on the same unit.
      ++scored_units_;
      true_admission_ += ActivatedExperts(predicted, input, groups);
      true_last_ += ActivatedExperts(predicted, RegroupTokens(last, input, o).group, groups);
      true_recorded_ += result.after;
    }
    return true;
  }

  // The recorded paths, as bit words per layer.
  void SaveState(StateWriter& out) const override {
    std::map<std::pair<uint64_t, int64_t>, const RoutingPath*> sorted;  // Deterministic bytes.
    for (const auto& [key, path] : recorded_) sorted[{key.prompt, key.position}] = &path;
    out.U64(sorted.size());
    for (const auto& [key, path] : sorted) {
      out.U64(key.first);
      out.I64(key.second);
      for (int l = 0; l < layers_; ++l)
        for (int w = 0; w < (experts_ + 63) / 64; ++w) {
          uint64_t word = 0;
          for (int b = 0; b < 64 && w * 64 + b < experts_; ++b)
            if (path->Test(l, w * 64 + b)) word |= uint64_t{1} << b;
          out.U64(word);
        }
    }
  }

  void LoadState(StateReader& in) override {
    recorded_.clear();
    const uint64_t n = in.U64();
    for (uint64_t i = 0; i < n; ++i) {
      PathKey key;
      key.prompt = in.U64();
      key.position = in.I64();
      RoutingPath path(layers_, experts_);
      for (int l = 0; l < layers_; ++l)
        for (int w = 0; w < (experts_ + 63) / 64; ++w) {
          const uint64_t word = in.U64();
          for (int b = 0; b < 64 && w * 64 + b < experts_; ++b)
            if ((word >> b) & 1) path.Set(l, w * 64 + b);
        }
      recorded_.insert_or_assign(key, std::move(path));
    }
  }

  void ReportJson(nlohmann::json* report) const override {
    (*report)["regroup"] = {{"recorded_paths", recorded_.size()},
                            {"predicted_from_recorded", recorded_used_},
                            {"predicted_from_last", last_used_},
                            {"predicted_experts_before", predicted_before_},
                            {"predicted_experts_after", predicted_after_},
                            {"scored_units", scored_units_},
                            {"true_experts_admission_order", true_admission_},
                            {"true_experts_last_path", true_last_},
                            {"true_experts_recorded_path", true_recorded_}};
  }

 private:
  struct Request {
    uint64_t prompt = 0;
    int64_t position = 0;       // Tokens it has run.
    int64_t pass_position = 0;  // Its position when the current pass began.
    RoutingPath chunk;          // OR over its tokens of its last pass.
    RoutingPath last;           // Its last token's path.
  };
  int layers_, experts_;
  RoutingPath every_expert_;  // Every expert of every MoE layer.
  RegroupOptions options_;
  std::map<int64_t, Request> requests_;
  std::vector<int64_t> owner_;       // The request of each token of the current pass.
  std::vector<int64_t> last_token_;  // Index of each request's last token in the pass.
  std::unordered_map<PathKey, RoutingPath, PathKeyHash> recorded_;
  int64_t recorded_used_ = 0, last_used_ = 0;
  int64_t predicted_before_ = 0, predicted_after_ = 0;  // Eq. 5 on the predicted paths.
  // Units whose every candidate had a recorded path, and Eq. 5 on those paths of the
  // admission-order split and of the last-path and recorded-path clusterings.
  int64_t scored_units_ = 0, true_admission_ = 0, true_last_ = 0, true_recorded_ = 0;
};

MOEX_REGISTER_POLICY({
    .name = "regroup",
    .roles = kRegroups,
    .doc = "regroup the server's units (--regroup N) by each request's last routing path, or "
           "by the paths an identical earlier run recorded (--policy-state: oracle), with "
           "ExpertFlow's balanced clustering; prefetches and evicts nothing",
    .source = "ExpertFlow §3.3 token scheduler, with the previous step's path as predictor",
    .params = ParamSpecsOf<PathRegrouperOptions>(),
    .test_specs = {"regroup+lfu"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<PathRegrouper>(f, p.As<PathRegrouperOptions>());
    },
});

}  // namespace
}  // namespace moex::policy

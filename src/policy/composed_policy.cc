#include "policy/composed_policy.h"

#include <set>

#include "core/error.h"

namespace moex::policy {

ComposedPolicy::ComposedPolicy(std::unique_ptr<Prefetcher> prefetcher,
                               std::unique_ptr<Evictor> evictor)
    : prefetcher_(std::move(prefetcher)), evictor_(std::move(evictor)) {}

std::string ComposedPolicy::name() const {
  return prefetcher_ ? prefetcher_->name() + "+" + evictor_->name() : evictor_->name();
}

// A prefetched expert counts as recently inserted, or LRU would evict it before use.
void ComposedPolicy::TouchPrefetches(const Decisions& out, size_t from) {
  for (size_t i = from; i < out.prefetch.size(); ++i)
    evictor_->Touch(out.prefetch[i].expert, false);
}

void ComposedPolicy::OnRequestBegin(const RequestBeginEvent& e, Decisions* out) {
  if (!prefetcher_) return;
  const size_t from = out->prefetch.size();
  prefetcher_->OnRequestBegin(e, out);
  TouchPrefetches(*out, from);
}

void ComposedPolicy::OnIterationBegin(const IterationBeginEvent& e, Decisions* out) {
  if (!prefetcher_) return;
  const size_t from = out->prefetch.size();
  prefetcher_->OnIterationBegin(e, out);
  TouchPrefetches(*out, from);
}

void ComposedPolicy::OnGate(const GateEvent& e, Decisions* out) {
  evictor_->OnGate(e);
  // Each routed expert is touched once per gate, in ascending id order.
  std::set<int32_t> routed(e.ids, e.ids + e.n_tokens * e.top_k);
  for (int32_t id : routed) evictor_->Touch({e.layer, id}, true);
  if (!prefetcher_) return;
  const size_t from = out->prefetch.size();
  prefetcher_->OnGate(e, out);
  TouchPrefetches(*out, from);
}

void ComposedPolicy::OnIterationEnd(Decisions* out) {
  if (!prefetcher_) return;
  const size_t from = out->prefetch.size();
  prefetcher_->OnIterationEnd(out);
  TouchPrefetches(*out, from);
}

std::vector<std::string> PolicyNames() {
  return {"ondemand",     "lru",          "lfu",          "random",         "belady",
          "nextgate",     "nextgate+lru", "nextgate+lfu", "nextgate+random", "nextgate+belady"};
}

std::unique_ptr<Policy> MakePolicy(const std::string& name, const PolicyContext& context) {
  std::string prefetch, evict = name;
  if (const size_t plus = name.find('+'); plus != std::string::npos) {
    prefetch = name.substr(0, plus);
    evict = name.substr(plus + 1);
  } else if (name == "nextgate") {
    prefetch = "nextgate";
    evict = "lru";
  }
  std::unique_ptr<Evictor> evictor;
  if (evict == "lru" || evict == "ondemand")
    evictor = MakeLruEvictor(context.config);
  else if (evict == "lfu")
    evictor = MakeLfuEvictor(context.config);
  else if (evict == "random")
    evictor = MakeRandomEvictor(context.seed);
  else if (evict == "belady")
    evictor = MakeBeladyEvictor(context);
  std::unique_ptr<Prefetcher> prefetcher;
  if (prefetch == "nextgate") prefetcher = MakeNextGatePrefetcher(context);
  if (!evictor || (!prefetch.empty() && !prefetcher)) {
    std::string valid;
    for (const auto& n : PolicyNames()) valid += (valid.empty() ? "" : ", ") + n;
    Fail("unknown policy '", name, "' (valid: ", valid, ")");
  }
  return std::make_unique<ComposedPolicy>(std::move(prefetcher), std::move(evictor));
}

}  // namespace moex::policy

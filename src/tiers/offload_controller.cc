#include "tiers/offload_controller.h"

#include <algorithm>

#include "core/error.h"

namespace moex::tiers {

void LayerCounters::Add(const LayerCounters& o) {
  hits += o.hits;
  misses += o.misses;
  streamed += o.streamed;
  prefetch_issued += o.prefetch_issued;
  prefetch_used += o.prefetch_used;
  prefetch_wasted += o.prefetch_wasted;
  prefetch_cancelled += o.prefetch_cancelled;
  prefetch_dropped += o.prefetch_dropped;
  evictions += o.evictions;
}

OffloadController::OffloadController(const CacheGeometry& geometry,
                                     std::unique_ptr<policy::Policy> policy)
    : cache_(geometry), policy_(std::move(policy)) {
  Check(policy_ != nullptr, "offload controller needs a policy");
  counters_.resize(static_cast<size_t>(geometry.num_layers));
  scorer_ = [this](const ExpertKey& k) { return Score(k); };
}

void OffloadController::Apply(policy::Decisions& d, std::vector<CacheCommand>* out) {
  for (const policy::Prefetch& p : d.prefetch) {
    if (p.tier != policy::Tier::kHost) continue;  // No device tier in this build.
    LayerCounters& c = counters_[static_cast<size_t>(p.expert.layer)];
    const int before = cache_.PresentChunks(p.expert);
    if (!cache_.Insert(p.expert, p.range, false, p.priority, scorer_, out)) {
      ++c.prefetch_dropped;
      continue;
    }
    if (cache_.PresentChunks(p.expert) == before) continue;  // Already there.
    ++c.prefetch_issued;
    cache_.MarkPrefetched(p.expert);
  }
  for (const ExpertKey& k : d.cancel) {
    if (!cache_.Unused(k)) continue;  // Only unused prefetches can be cancelled.
    cache_.TakeUnused(k);
    cache_.Remove(k, out);
    ++counters_[static_cast<size_t>(k.layer)].prefetch_cancelled;
  }
  d.Clear();
}

void OffloadController::RequestBegin(const policy::RequestBeginEvent& e,
                                     std::vector<CacheCommand>* out) {
  policy_->OnRequestBegin(e, &decisions_);
  Apply(decisions_, out);
}

void OffloadController::IterationBegin(const policy::IterationBeginEvent& e,
                                       std::vector<CacheCommand>* out) {
  policy_->OnIterationBegin(e, &decisions_);
  Apply(decisions_, out);
}

std::vector<PlannedExpert> OffloadController::Gate(const policy::GateEvent& e,
                                                   std::vector<CacheCommand>* out) {
  std::vector<int32_t> routed(e.ids, e.ids + e.n_tokens * e.top_k);
  std::sort(routed.begin(), routed.end());
  routed.erase(std::unique(routed.begin(), routed.end()), routed.end());
  std::vector<ExpertKey> order;
  for (int pass = 0; pass < 2; ++pass)
    for (int32_t id : routed)
      if (cache_.Present({e.layer, id}) == (pass == 0)) order.push_back({e.layer, id});
  policy_->ComputeOrder(e.layer, &order);
  Check(order.size() == routed.size(), "policy ", policy_->name(),
        " changed the set of experts in compute_order");

  LayerCounters& c = counters_[static_cast<size_t>(e.layer)];
  for (const ExpertKey& k : order) cache_.Pin(k);  // Misses must not evict this layer's hits.
  std::vector<PlannedExpert> plan;
  for (const ExpertKey& k : order) {
    if (cache_.TakeUnused(k)) ++c.prefetch_used;
    PlannedExpert p{k, cache_.Present(k)};
    CacheCommand promote;
    promote.kind = CacheCommand::kPromote;
    promote.expert = k;
    out->push_back(promote);  // Queued prefetch chunks of a routed expert become demand.
    if (p.hit) {
      ++c.hits;
    } else {
      ++c.misses;
      if (!cache_.Insert(k, {}, true, 0, scorer_, out)) ++c.streamed;
    }
    plan.push_back(p);
  }
  policy_->OnGate(e, &decisions_);
  Apply(decisions_, out);
  return plan;
}

void OffloadController::ExpertDone(const policy::ExpertDoneEvent& e,
                                   std::vector<CacheCommand>* out) {
  cache_.Unpin({e.layer, e.expert});
  policy_->OnExpertDone(e, &decisions_);
  Apply(decisions_, out);
}

void OffloadController::IterationEnd(std::vector<CacheCommand>* out) {
  policy_->OnIterationEnd(&decisions_);
  Apply(decisions_, out);
}

void OffloadController::RequestEnd(const policy::RequestEndEvent& e,
                                   std::vector<CacheCommand>* out) {
  policy_->OnRequestEnd(e, &decisions_);
  Apply(decisions_, out);
}

void OffloadController::Abandon(const ExpertKey& key, bool drop, std::vector<CacheCommand>* out) {
  cache_.Unpin(key);
  if (drop) cache_.Remove(key, out);
}

std::vector<LayerCounters> OffloadController::Counters() const {
  std::vector<LayerCounters> c = counters_;
  for (size_t l = 0; l < c.size(); ++l) {
    c[l].prefetch_wasted = cache_.wasted_per_layer()[l];
    c[l].evictions = cache_.evictions_per_layer()[l];
  }
  return c;
}

}  // namespace moex::tiers

#include "tiers/offload_controller.h"

#include <algorithm>
#include <chrono>

#include "core/dcheck.h"
#include "core/error.h"

namespace moex::tiers {

void LayerCounters::Add(const LayerCounters& o) {
  hits += o.hits;
  misses += o.misses;
  partial_hits += o.partial_hits;
  streamed += o.streamed;
  bypassed += o.bypassed;
  chunks_streamed += o.chunks_streamed;
  prefetch_issued += o.prefetch_issued;
  prefetch_used += o.prefetch_used;
  prefetch_late += o.prefetch_late;
  prefetch_wasted += o.prefetch_wasted;
  prefetch_wasted_chunks += o.prefetch_wasted_chunks;
  prefetch_cancelled += o.prefetch_cancelled;
  prefetch_dropped += o.prefetch_dropped;
  prefetch_foreign += o.prefetch_foreign;
  evictions += o.evictions;
}

OffloadController::OffloadController(const CacheGeometry& geometry,
                                     std::unique_ptr<policy::Policy> policy,
                                     std::unique_ptr<policy::PolicyWorker> worker,
                                     std::vector<char> moe_layer)
    : cache_(geometry),
      policy_(std::move(policy)),
      worker_(std::move(worker)),
      predictions_(moe_layer, geometry.num_experts) {
  MOEX_DCHECK(policy_ != nullptr, "offload controller needs a policy");
  Check(moe_layer.size() == static_cast<size_t>(geometry.num_layers),
        "offload controller: MoE layer map of the wrong size");
  if (!worker_) worker_ = std::make_unique<policy::PolicyWorker>(policy::PolicyWorker::Mode::kSync);
  worker_us_before_ = worker_->job_us();
  worker_jobs_before_ = worker_->jobs_run();
  counters_.resize(static_cast<size_t>(geometry.num_layers));
  scorer_ = [this](const ExpertKey& k) { return Score(k); };
}

bool OffloadController::RegroupPasses(const std::vector<policy::PassCandidate>& candidates,
                                      int groups, std::vector<int>* group) {
  const auto start = std::chrono::steady_clock::now();
  const bool regrouped = policy_->RegroupPasses(candidates, groups, group);
  timing_.hook_us +=
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return regrouped;
}

template <typename Fn>
void OffloadController::Decide(Fn handler, std::vector<CacheCommand>* out) {
  const auto start = std::chrono::steady_clock::now();
  handler();
  timing_.hook_us +=
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const size_t from = decisions_.prefetch.size();
  worker_->Poll(&decisions_);
  // Prefetches asked for by finished worker jobs are uses too: the evictor hears of them as
  // it hears of those asked for inside the event (ComposedPolicy touches those).
  for (size_t i = from; i < decisions_.prefetch.size(); ++i)
    policy_->OnTouch(decisions_.prefetch[i].expert, false);
  Apply(decisions_, out);
}

void OffloadController::Apply(policy::Decisions& d, std::vector<CacheCommand>* out) {
  const int64_t page_bytes = cache_.geometry().page_bytes;
  if (!d.layer_budgets.empty()) {
    std::vector<int64_t> pages(d.layer_budgets.size());
    for (size_t l = 0; l < pages.size(); ++l)
      pages[l] = d.layer_budgets[l] < 0 ? -1 : d.layer_budgets[l] / page_bytes;
    Check(pages.size() == static_cast<size_t>(cache_.geometry().num_layers), "policy ",
          policy_->name(), " set ", pages.size(), " layer budgets for ",
          cache_.geometry().num_layers, " layers");
    if (!cache_.SetLayerBudgets(pages, scorer_, out)) ++timing_.budget_refused;
  }
  for (const policy::Retain& r : d.retain) cache_.Retain(r.expert, r.range, out);
  for (const ExpertKey& k : d.unpin) cache_.PolicyPin(k, false);
  for (const policy::Prefetch& p : d.prefetch) {
    if (p.tier != policy::Tier::kHost) continue;  // No device tier in this build.
    LayerCounters& c = counters_[static_cast<size_t>(p.expert.layer)];
    if (owns_ && !owns_(p.expert)) {
      ++c.prefetch_foreign;
      continue;
    }
    predictions_.Predict(p.expert);
    const int before = cache_.PresentChunks(p.expert);
    if (!cache_.Insert(p.expert, p.range, false, p.priority, scorer_, out)) {
      ++c.prefetch_dropped;
      continue;
    }
    if (cache_.PresentChunks(p.expert) == before) continue;  // Already there.
    ++c.prefetch_issued;
    cache_.MarkPrefetched(p.expert);
  }
  for (const ExpertKey& k : d.pin) cache_.PolicyPin(k, true);
  for (const policy::Reprioritize& r : d.reprioritize) {
    CacheCommand c;
    c.kind = CacheCommand::kReprioritize;
    c.expert = r.expert;
    c.priority = r.priority;
    out->push_back(c);
  }
  for (const ExpertKey& k : d.cancel) {
    if (!cache_.Unused(k) || cache_.Pinned(k)) continue;  // Only unused prefetches can go.
    cache_.TakeUnused(k);
    cache_.Remove(k, out);
    ++counters_[static_cast<size_t>(k.layer)].prefetch_cancelled;
  }
  d.Clear();
}

void OffloadController::RequestBegin(const policy::RequestBeginEvent& e,
                                     std::vector<CacheCommand>* out) {
  predictions_.AtPassBoundary();
  Decide([&] { policy_->OnRequestBegin(e, &decisions_); }, out);
}

void OffloadController::IterationBegin(const policy::IterationBeginEvent& e,
                                       std::vector<CacheCommand>* out) {
  ++timing_.passes;
  predictions_.AtPassBoundary();
  Decide([&] { policy_->OnIterationBegin(e, &decisions_); }, out);
}

std::vector<PlannedExpert> OffloadController::Gate(const policy::GateEvent& e,
                                                   std::vector<CacheCommand>* out) {
  Check(e.n_tokens == 0 || e.n_routed > 0, "the gate event of layer ", e.layer,
        " carries no routed set (policy::SetRouted)");
  const std::span<const int32_t> routed = e.routed_experts();
  for (int32_t id : routed)
    Check(id >= 0 && id < cache_.geometry().num_experts, "gate of layer ", e.layer,
          " routes to expert ", id, " of ", cache_.geometry().num_experts);
  std::vector<ExpertKey> order;
  for (int pass = 0; pass < 2; ++pass)
    for (int32_t id : routed)
      if (cache_.Present({e.layer, id}) == (pass == 0)) order.push_back({e.layer, id});
  policy_->ComputeOrder(e.layer, &order);
  {
    std::vector<ExpertKey> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    Check(sorted.size() == routed.size() &&
              std::equal(sorted.begin(), sorted.end(), routed.begin(),
                         [](const ExpertKey& k, int32_t id) { return k.expert == id; }),
          "policy ", policy_->name(), " changed the set of experts in compute_order");
  }

  LayerCounters& c = counters_[static_cast<size_t>(e.layer)];
  const int chunks = cache_.geometry().chunks_per_expert();
  predictions_.Resolve(e.layer, routed, [&](int32_t id) {
    const ExpertKey k{e.layer, id};
    return cache_.Present(k) && (!landed_ || landed_(k));
  });
  for (const ExpertKey& k : order) cache_.Pin(k);  // Misses must not evict this layer's hits.
  std::vector<PlannedExpert> plan;
  for (const ExpertKey& k : order) {
    PlannedExpert p{k, cache_.Present(k)};
    if (cache_.TakeUnused(k)) {
      ++c.prefetch_used;
      if (landed_ && !landed_(k)) ++c.prefetch_late;
    }
    CacheCommand promote;
    promote.kind = CacheCommand::kPromote;
    promote.expert = k;
    out->push_back(promote);  // Queued prefetch chunks of a routed expert become demand.
    if (p.hit) {
      ++c.hits;
    } else {
      const auto start = std::chrono::steady_clock::now();
      ++c.misses;
      if (cache_.PresentChunks(k) > 0) ++c.partial_hits;
      // What the policy keeps of a miss is inserted; the rest is streamed past the cache.
      // A miss the policy does not admit goes through staging like one that finds no room.
      bool refused = false;
      ExpertCache::Admission admit;
      if (policy_->decides_admission())
        admit = [&](double lowest) { return !(refused = !policy_->Admit(k, lowest)); };
      if (!cache_.Insert(k, policy_->KeepOnMiss(k), true, 0, scorer_, out, admit))
        ++(refused ? c.bypassed : c.streamed);
      c.chunks_streamed += chunks - cache_.PresentChunks(k);
      timing_.evict_us +=
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
    }
    plan.push_back(p);
  }
  predictions_.AtGate(e.layer);
  Decide([&] { policy_->OnGate(e, &decisions_); }, out);
  return plan;
}

void OffloadController::ExpertDone(const policy::ExpertDoneEvent& e,
                                   std::vector<CacheCommand>* out) {
  cache_.Unpin({e.layer, e.expert});
  Decide([&] { policy_->OnExpertDone(e, &decisions_); }, out);
}

void OffloadController::IterationEnd(std::vector<CacheCommand>* out) {
  predictions_.AtPassBoundary();
  Decide([&] { policy_->OnIterationEnd(&decisions_); }, out);
}

void OffloadController::RequestEnd(const policy::RequestEndEvent& e,
                                   std::vector<CacheCommand>* out) {
  predictions_.AtPassBoundary();
  Decide([&] { policy_->OnRequestEnd(e, &decisions_); }, out);
}

void OffloadController::Abandon(const ExpertKey& key, bool drop, std::vector<CacheCommand>* out) {
  cache_.Unpin(key);
  if (drop) cache_.Remove(key, out);
}

std::vector<LayerCounters> OffloadController::Counters() const {
  std::vector<LayerCounters> c = counters_;
  for (size_t l = 0; l < c.size(); ++l) {
    c[l].prefetch_wasted = cache_.wasted_per_layer()[l];
    c[l].prefetch_wasted_chunks = cache_.wasted_chunks_per_layer()[l];
    c[l].evictions = cache_.evictions_per_layer()[l];
  }
  return c;
}

PolicyTiming OffloadController::Timing() const {
  PolicyTiming t = timing_;
  t.worker_us = worker_->job_us() - worker_us_before_;
  t.worker_jobs = worker_->jobs_run() - worker_jobs_before_;
  t.jobs_inline = worker_->mode() != policy::PolicyWorker::Mode::kAsync;
  return t;
}

}  // namespace moex::tiers

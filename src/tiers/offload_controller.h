// The deterministic half of offloading: feeds the event stream to the policy, applies its
// decisions and the demand of each gate to the ExpertCache, and counts hits, misses,
// prefetch outcomes and prediction quality. It produces CacheCommands and never touches
// I/O or clocks (a driver may give it a probe for landed chunks, and time the policy), so
// the engine (which executes the commands) and the trace-replay simulator (which costs
// them) share it and agree on every count that does not depend on timing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "policy/event_sink.h"
#include "policy/policy.h"
#include "policy/policy_worker.h"
#include "tiers/expert_cache.h"
#include "tiers/prediction_metrics.h"

namespace moex::tiers {

struct LayerCounters {
  int64_t hits = 0;             // Routed experts wholly in the cache at the gate.
  int64_t misses = 0;           // Routed experts with at least one chunk absent.
  int64_t partial_hits = 0;     // Misses with some chunks present (a resident prefix, say).
  int64_t streamed = 0;         // Misses that did not fit (all pages pinned): read, used, not kept.
  int64_t bypassed = 0;  // Misses the policy did not admit (Policy::Admit): read, used, not kept.
  int64_t chunks_streamed = 0;  // Chunks read for one use only (no room, or not kept).
  int64_t prefetch_issued = 0;  // Prefetches that inserted at least one chunk.
  int64_t prefetch_used = 0;    // Prefetched experts later routed to.
  int64_t prefetch_late = 0;    // Of those, not yet wholly landed at the gate (driver-timed).
  int64_t prefetch_wasted = 0;  // Prefetched experts evicted before use.
  int64_t prefetch_wasted_chunks = 0;  // Their chunks (bytes wasted = chunks x page).
  int64_t prefetch_cancelled = 0;      // Prefetched experts cancelled before use.
  int64_t prefetch_dropped = 0;        // Prefetches refused for lack of unpinned room.
  int64_t prefetch_foreign = 0;  // Prefetches of experts another rank holds (set_owner): ignored.
  int64_t evictions = 0;

  void Add(const LayerCounters& o);
};

// One routed expert of a layer, in the order the executor should prefer.
struct PlannedExpert {
  ExpertKey key;
  bool hit = false;
};

// CPU the policy took: its event handlers on the forward pass, and its worker's jobs.
struct PolicyTiming {
  double hook_us = 0;
  double worker_us = 0;  // Jobs since the controller was made (not those of --learn-from).
  int64_t worker_jobs = 0;
  bool jobs_inline = false;  // Jobs ran inside Submit (sync, modelled), so inside hook_us.
  int64_t passes = 0;
  int64_t budget_refused = 0;  // Per-layer budget splits the cache could not honour.
  // Demand misses' insertions at the gates: the evictor's scoring and admission with the
  // cache's bookkeeping (an upper bound on the eviction policy's share of the forward pass).
  double evict_us = 0;
};

class OffloadController final : public policy::PassRegrouper {
 public:
  // `worker` (may be null: a synchronous one is made) is the one the policy's facts named.
  OffloadController(const CacheGeometry& geometry, std::unique_ptr<policy::Policy> policy,
                    std::unique_ptr<policy::PolicyWorker> worker, std::vector<char> moe_layer);

  void RequestBegin(const policy::RequestBeginEvent& e, std::vector<CacheCommand>* out);
  void IterationBegin(const policy::IterationBeginEvent& e, std::vector<CacheCommand>* out);
  // Demand first (pins every routed expert, counts hits and misses, inserts what the policy
  // keeps of each miss), then the policy's decisions. Returns the routed experts in
  // compute-preference order.
  std::vector<PlannedExpert> Gate(const policy::GateEvent& e, std::vector<CacheCommand>* out);
  void ExpertDone(const policy::ExpertDoneEvent& e, std::vector<CacheCommand>* out);
  void IterationEnd(std::vector<CacheCommand>* out);
  void RequestEnd(const policy::RequestEndEvent& e, std::vector<CacheCommand>* out);

  // Token regrouping between passes: the policy's answer (timed as policy CPU, like its
  // event handlers); it decides nothing for the cache.
  bool RegroupPasses(const std::vector<policy::PassCandidate>& candidates, int groups,
                     std::vector<int>* group) override;

  // Error path: unpins an expert without an expert_done event and drops it from the cache.
  void Abandon(const ExpertKey& key, bool drop, std::vector<CacheCommand>* out);

  // Whether every present chunk of an expert has landed (the driver knows; without a probe
  // nothing is late).
  void set_landed_probe(std::function<bool(const ExpertKey&)> probe) { landed_ = std::move(probe); }
  // Expert parallelism (docs/expert-parallel.md): this stack holds only the experts `owns`
  // names. The policy still sees every event it is given, but a prefetch of another rank's
  // expert takes no page and reads nothing (counted as prefetch_foreign), and is not scored
  // as a prediction. Unset: every expert is this stack's.
  void set_owner(std::function<bool(const ExpertKey&)> owns) { owns_ = std::move(owns); }

  const ExpertCache& cache() const { return cache_; }
  policy::Policy& policy() { return *policy_; }
  policy::PolicyWorker& worker() { return *worker_; }
  // Per decoder layer; evictions and wasted prefetches are read from the cache.
  std::vector<LayerCounters> Counters() const;
  const PredictionMetrics& predictions() const { return predictions_; }
  PolicyTiming Timing() const;

 private:
  // Runs one policy handler (timed), then the worker's finished jobs, then applies.
  template <typename Fn>
  void Decide(Fn handler, std::vector<CacheCommand>* out);
  void Apply(policy::Decisions& d, std::vector<CacheCommand>* out);
  double Score(const ExpertKey& k) { return policy_->EvictScore(k); }

  ExpertCache cache_;
  std::unique_ptr<policy::Policy> policy_;
  std::unique_ptr<policy::PolicyWorker> worker_;  // After policy_: stops before it goes.
  double worker_us_before_ = 0;  // What the worker ran before (the policy's learning).
  int64_t worker_jobs_before_ = 0;
  std::vector<LayerCounters> counters_;
  PredictionMetrics predictions_;
  PolicyTiming timing_;
  policy::Decisions decisions_;
  ExpertCache::Scorer scorer_;
  std::function<bool(const ExpertKey&)> landed_;
  std::function<bool(const ExpertKey&)> owns_;
};

}  // namespace moex::tiers

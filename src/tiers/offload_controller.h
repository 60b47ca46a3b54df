// The deterministic half of offloading: feeds the event stream to the policy, applies its
// decisions and the demand of each gate to the ExpertCache, and counts hits, misses and
// prefetch outcomes. It produces CacheCommands and never touches I/O or clocks, so the
// engine (which executes the commands) and the trace-replay simulator (which costs them)
// share it and agree on every count.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "policy/policy.h"
#include "tiers/expert_cache.h"

namespace moex::tiers {

struct LayerCounters {
  int64_t hits = 0;             // Routed experts wholly in the cache at the gate.
  int64_t misses = 0;           // Routed experts with at least one chunk absent.
  int64_t streamed = 0;         // Misses that did not fit (all pages pinned): read, used, not kept.
  int64_t prefetch_issued = 0;  // Prefetches that inserted at least one chunk.
  int64_t prefetch_used = 0;    // Prefetched experts later routed to.
  int64_t prefetch_wasted = 0;  // Prefetched experts evicted before use.
  int64_t prefetch_cancelled = 0;  // Prefetched experts cancelled before use.
  int64_t prefetch_dropped = 0;    // Prefetches refused for lack of unpinned room.
  int64_t evictions = 0;

  void Add(const LayerCounters& o);
};

// One routed expert of a layer, in the order the executor should prefer.
struct PlannedExpert {
  ExpertKey key;
  bool hit = false;
};

class OffloadController {
 public:
  OffloadController(const CacheGeometry& geometry, std::unique_ptr<policy::Policy> policy);

  void RequestBegin(const policy::RequestBeginEvent& e, std::vector<CacheCommand>* out);
  void IterationBegin(const policy::IterationBeginEvent& e, std::vector<CacheCommand>* out);
  // Demand first (pins every routed expert, counts hits and misses, inserts misses), then
  // the policy's decisions. Returns the routed experts in compute-preference order.
  std::vector<PlannedExpert> Gate(const policy::GateEvent& e, std::vector<CacheCommand>* out);
  void ExpertDone(const policy::ExpertDoneEvent& e, std::vector<CacheCommand>* out);
  void IterationEnd(std::vector<CacheCommand>* out);
  void RequestEnd(const policy::RequestEndEvent& e, std::vector<CacheCommand>* out);

  // Error path: unpins an expert without an expert_done event and drops it from the cache.
  void Abandon(const ExpertKey& key, bool drop, std::vector<CacheCommand>* out);

  const ExpertCache& cache() const { return cache_; }
  policy::Policy& policy() { return *policy_; }
  // Per decoder layer; evictions and wasted prefetches are read from the cache.
  std::vector<LayerCounters> Counters() const;

 private:
  void Apply(policy::Decisions& d, std::vector<CacheCommand>* out);
  double Score(const ExpertKey& k) { return policy_->EvictScore(k); }

  ExpertCache cache_;
  std::unique_ptr<policy::Policy> policy_;
  std::vector<LayerCounters> counters_;
  policy::Decisions decisions_;
  ExpertCache::Scorer scorer_;
};

}  // namespace moex::tiers

// A cache of whole experts that exists only as bookkeeping: a policy runs one beside the
// real cache to learn what another eviction rule would have hit (the `reuse` evictor's
// guard compares its own choices with LRU's on the same demand). It sees only demand, gate
// by gate, and has no chunks, budgets or prefetches.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "policy/events.h"

namespace moex::policy {

class ShadowCache {
 public:
  using Scorer = std::function<double(const ExpertKey&)>;  // Lower = evicted first.
  // Whether to insert a miss, given the lowest score it would compete with.
  using Admitter = std::function<bool(const ExpertKey&, double)>;

  ShadowCache(int num_layers, int num_experts, int64_t capacity_experts);

  // One gate's demand (`routed`: distinct experts, ascending). Misses are inserted in
  // order, each evicting the lowest-scored resident expert that this gate does not route
  // (scores are taken once per gate, before any insertion); `admit` (may be null) may
  // refuse a miss. Returns the hits.
  int64_t Serve(const std::vector<ExpertKey>& routed, const Scorer& score, const Admitter& admit);
  bool Holds(const ExpertKey& k) const { return in_[Index(k)] != 0; }
  int64_t size() const { return static_cast<int64_t>(members_.size()); }

 private:
  size_t Index(const ExpertKey& k) const { return KeyIndex(k, experts_); }
  int experts_;
  int64_t capacity_;
  std::vector<char> in_;  // Per expert.
  std::vector<ExpertKey> members_;
};

}  // namespace moex::policy

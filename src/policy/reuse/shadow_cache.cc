#include "policy/reuse/shadow_cache.h"

#include <algorithm>
#include <utility>

namespace moex::policy {

ShadowCache::ShadowCache(int num_layers, int num_experts, int64_t capacity_experts)
    : experts_(num_experts),
      capacity_(std::max<int64_t>(capacity_experts, 0)),
      in_(static_cast<size_t>(num_layers) * static_cast<size_t>(num_experts), 0) {}

int64_t ShadowCache::Serve(const std::vector<ExpertKey>& routed, const Scorer& score,
                           const Admitter& admit) {
  int64_t hits = 0;
  std::vector<ExpertKey> misses;
  for (const ExpertKey& k : routed) {
    if (in_[Index(k)]) {
      ++hits;
    } else {
      misses.push_back(k);
    }
  }
  if (misses.empty() || capacity_ == 0) return hits;
  // Victims: resident experts this gate does not route, lowest score first.
  std::vector<std::pair<double, size_t>> victims;  // (score, position in members_)
  size_t free_slots = static_cast<size_t>(capacity_) - members_.size();
  if (misses.size() > free_slots) {
    std::vector<char> routed_now(in_.size(), 0);
    for (const ExpertKey& k : routed) routed_now[Index(k)] = 1;
    for (size_t m = 0; m < members_.size(); ++m)
      if (!routed_now[Index(members_[m])]) victims.push_back({score(members_[m]), m});
    std::sort(victims.begin(), victims.end());
  }
  size_t next_victim = 0;
  for (const ExpertKey& k : misses) {
    if (free_slots > 0) {
      --free_slots;
      members_.push_back(k);
      in_[Index(k)] = 1;
      continue;
    }
    if (next_victim == victims.size()) break;  // Everything else is routed by this gate.
    const auto [lowest, m] = victims[next_victim];
    if (admit && !admit(k, lowest)) continue;
    ++next_victim;
    in_[Index(members_[m])] = 0;
    members_[m] = k;
    in_[Index(k)] = 1;
  }
  return hits;
}

}  // namespace moex::policy

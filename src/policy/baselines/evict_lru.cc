// LRU: evict the expert whose last use (routing or prefetch insertion) is oldest.
#include <vector>

#include "policy/registry.h"

namespace moex::policy {
namespace {

class LruEvictor : public Policy {
 public:
  explicit LruEvictor(const PolicyFacts& f)
      : experts_(f.num_experts), last_(static_cast<size_t>(f.num_layers) * f.num_experts, 0) {}
  std::string name() const override { return "lru"; }
  bool evicts() const override { return true; }
  void OnTouch(const ExpertKey& k, bool demand) override { last_[Index(k)] = ++clock_; }
  double EvictScore(const ExpertKey& k) override { return static_cast<double>(last_[Index(k)]); }

 private:
  size_t Index(const ExpertKey& k) const { return KeyIndex(k, experts_); }
  int experts_;
  std::vector<uint64_t> last_;
  uint64_t clock_ = 0;
};

MOEX_REGISTER_POLICY({
    .name = "lru",
    .roles = kEvicts,
    .doc = "evict the least recently used expert (a prefetch insertion counts as a use)",
    .source = "baseline",
    .recency_eviction = true,
    .aliases = {"ondemand"},
    .make = [](const PolicyFacts& f, const Params&) -> std::unique_ptr<Policy> {
      return std::make_unique<LruEvictor>(f);
    },
});

}  // namespace
}  // namespace moex::policy

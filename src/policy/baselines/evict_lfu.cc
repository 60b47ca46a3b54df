// LFU: evict the expert routed to least often; among equals, the least recently used.
// A prefetch insertion refreshes recency but is not a use.
#include <vector>

#include "policy/registry.h"

namespace moex::policy {
namespace {

class LfuEvictor : public Policy {
 public:
  explicit LfuEvictor(const PolicyFacts& f)
      : experts_(f.num_experts),
        count_(static_cast<size_t>(f.num_layers) * f.num_experts, 0),
        last_(count_.size(), 0) {}
  std::string name() const override { return "lfu"; }
  bool evicts() const override { return true; }
  void OnTouch(const ExpertKey& k, bool demand) override {
    if (demand) ++count_[Index(k)];
    last_[Index(k)] = ++clock_;
  }
  // count + recency fraction in [0, 1): frequency first, recency breaks ties.
  double EvictScore(const ExpertKey& k) override {
    const size_t i = Index(k);
    return static_cast<double>(count_[i]) +
           static_cast<double>(last_[i]) / static_cast<double>(clock_ + 1);
  }

 private:
  size_t Index(const ExpertKey& k) const { return KeyIndex(k, experts_); }
  int experts_;
  std::vector<uint64_t> count_;
  std::vector<uint64_t> last_;
  uint64_t clock_ = 0;
};

MOEX_REGISTER_POLICY({
    .name = "lfu",
    .roles = kEvicts,
    .doc = "evict the least frequently routed expert; ties by least recent use",
    .source = "baseline",
    .make = [](const PolicyFacts& f, const Params&) -> std::unique_ptr<Policy> {
      return std::make_unique<LfuEvictor>(f);
    },
});

}  // namespace
}  // namespace moex::policy

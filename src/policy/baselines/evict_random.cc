// Random eviction: each candidate gets a fresh pseudo-random score from a seeded generator.
// The cache asks in a fixed order, so a replay with the same seed evicts the same experts.
#include "policy/registry.h"

namespace moex::policy {
namespace {

class RandomEvictor : public Policy {
 public:
  explicit RandomEvictor(uint64_t seed) : state_(seed) {}
  std::string name() const override { return "random"; }
  bool evicts() const override { return true; }
  double EvictScore(const ExpertKey&) override {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<double>((z ^ (z >> 31)) >> 11);
  }

 private:
  uint64_t state_;
};

MOEX_REGISTER_POLICY({
    .name = "random",
    .roles = kEvicts,
    .doc = "evict a pseudo-random expert (seeded by --seed, so replays are repeatable)",
    .source = "baseline",
    .make = [](const PolicyFacts& f, const Params&) -> std::unique_ptr<Policy> {
      return std::make_unique<RandomEvictor>(f.seed);
    },
});

}  // namespace
}  // namespace moex::policy

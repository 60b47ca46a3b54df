// The walk-through of docs/design.md ("Adding a policy"), kept honest: a policy written in
// the test tree, its options (parameters declared once), one class and one registration,
// nothing else edited. The conformance suite
// (tests/policy_conformance_test.cc) finds it in the registry like every other policy and
// checks it: lossless at every budget and worker mode, the simulator equal to the engine.
// The tests here check its own rule by hand.
#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "core/error.h"
#include "policy/registry.h"

namespace moex::policy {
namespace {

// LRU-K (O'Neil et al., SIGMOD 1993): evict the expert whose k-th most recent use is the
// oldest; an expert used fewer than k times goes first (a score in [-1, 0): by its last
// use, never used first).
struct SampleLruKOptions {
  int k = 2;

  template <class V>
  void VisitParams(V& v) {
    v.Int("k", k, 1, 8, "uses remembered per expert (1: LRU)");
  }
};

class SampleLruK : public Policy {
 public:
  SampleLruK(const PolicyFacts& f, const SampleLruKOptions& o)
      : experts_(f.num_experts),
        k_(o.k),
        uses_(static_cast<size_t>(f.num_layers) * f.num_experts) {}
  std::string name() const override { return "sample-lru-k"; }
  bool evicts() const override { return true; }
  void OnTouch(const ExpertKey& e, bool /*demand*/) override {
    std::deque<uint64_t>& u = uses_[KeyIndex(e, experts_)];
    u.push_back(++clock_);
    if (static_cast<int>(u.size()) > k_) u.pop_front();
  }
  double EvictScore(const ExpertKey& e) override {
    const std::deque<uint64_t>& u = uses_[KeyIndex(e, experts_)];
    if (static_cast<int>(u.size()) < k_)
      return -1.0 / (1.0 + static_cast<double>(u.empty() ? 0 : u.back()));
    return static_cast<double>(u.front());  // Use times start at 1.
  }

 private:
  int experts_;
  int k_;
  std::vector<std::deque<uint64_t>> uses_;  // The last k use times of each expert.
  uint64_t clock_ = 0;
};

MOEX_REGISTER_POLICY({
    .name = "sample-lru-k",
    .roles = kEvicts,
    .doc = "evict the expert whose k-th most recent use is oldest (the walk-through's policy)",
    .source = "O'Neil et al., SIGMOD 1993 (tests/policy_sample_test.cc)",
    .params = ParamSpecsOf<SampleLruKOptions>(),
    .test_specs = {"sample-lru-k:k=1", "sample-lru-k:k=3"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<SampleLruK>(f, p.As<SampleLruKOptions>());
    },
});

PolicyFacts Facts() {
  PolicyFacts f;
  f.num_layers = 2;
  f.num_experts = 4;
  return f;
}

TEST(SamplePolicy, IsRegisteredWithItsParameter) {
  const PolicyInfo* info = FindPolicy("sample-lru-k");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->roles, kEvicts);
  const std::vector<ResolvedPart> parts = ResolvePolicySpec("sample-lru-k:k=3");
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].params.As<SampleLruKOptions>().k, 3);
  EXPECT_THROW(ResolvePolicySpec("sample-lru-k:k=9"), Error);
}

// Hand-computed: k = 2; uses at times 1..5: A, B, A, C, B.
// A's uses {1, 3} -> score 1; B's {2, 5} -> 2; C's {4}, fewer than k -> -1 / (1 + 4) = -0.2;
// D never used -> -1. Eviction takes the lowest score: D, then C, then A, then B.
TEST(SamplePolicy, ScoresByTheKthMostRecentUse) {
  const ExpertKey a{0, 0}, b{0, 1}, c{1, 2}, d{1, 3};
  std::unique_ptr<Policy> p =
      FindPolicy("sample-lru-k")->make(Facts(), ResolvePolicySpec("sample-lru-k")[0].params);
  for (const ExpertKey& e : {a, b, a, c, b}) p->OnTouch(e, true);
  EXPECT_DOUBLE_EQ(p->EvictScore(a), 1.0);
  EXPECT_DOUBLE_EQ(p->EvictScore(b), 2.0);
  EXPECT_DOUBLE_EQ(p->EvictScore(c), -0.2);
  EXPECT_DOUBLE_EQ(p->EvictScore(d), -1.0);
}

}  // namespace
}  // namespace moex::policy

// Token regrouping (ExpertFlow §3.3): Eq. 5 on hand-computed splits, Fig. 4's two batches,
// balanced sizes, the safeguard and determinism.
#include "policy/common/token_regrouping.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>

#include "policy/registry.h"
#include "support/policy_events.h"

namespace moex::policy {
namespace {

// One layer of `experts` experts; each token's routed experts.
std::vector<RoutingPath> OneLayer(int experts, const std::vector<std::vector<int>>& tokens) {
  std::vector<RoutingPath> paths;
  for (const auto& routed : tokens) {
    RoutingPath p(1, experts);
    for (int e : routed) p.Set(0, e);
    paths.push_back(p);
  }
  return paths;
}

std::vector<int> GroupSizes(const std::vector<int>& group, int groups) {
  std::vector<int> sizes(groups, 0);
  for (int g : group) ++sizes.at(g);
  return sizes;
}

TEST(TokenRegrouping, ActivatedExpertsIsTheSumOfEachGroupsOr) {
  // Group 0: {0,1} | {1,2} -> {0,1,2} = 3; group 1: {3} | {3} -> 1. Eq. 5 = 4.
  const auto paths = OneLayer(4, {{0, 1}, {3}, {1, 2}, {3}});
  EXPECT_EQ(ActivatedExperts(paths, std::vector<int>{0, 1, 0, 1}, 2), 4);
  // Pairs {0,1}+{3} and {1,2}+{3}: 3 + 3.
  EXPECT_EQ(ActivatedExperts(paths, std::vector<int>{0, 0, 1, 1}, 2), 6);
  // One group: the union {0,1,2,3}.
  EXPECT_EQ(ActivatedExperts(paths, std::vector<int>{0, 0, 0, 0}, 1), 4);
  EXPECT_THROW(ActivatedExperts(paths, std::vector<int>{0, 1, 2, 0}, 2), std::invalid_argument);
  EXPECT_THROW(ActivatedExperts(paths, std::vector<int>{0, 1}, 2), std::invalid_argument);
  EXPECT_THROW(ActivatedExperts(paths, std::vector<int>{0, 0, 0, 0}, 0), std::invalid_argument);
}

TEST(TokenRegrouping, BalancedSizesAndTheContiguousSplit) {
  EXPECT_EQ(BalancedSizes(8, 2), (std::vector<int>{4, 4}));
  EXPECT_EQ(BalancedSizes(7, 2), (std::vector<int>{4, 3}));
  EXPECT_EQ(BalancedSizes(10, 4), (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(BalancedSizes(1, 3), (std::vector<int>{1, 0, 0}));
  EXPECT_EQ(ContiguousGroups(5, 2), (std::vector<int>{0, 0, 0, 1, 1}));
  EXPECT_EQ(ContiguousGroups(5, 3), (std::vector<int>{0, 0, 1, 1, 2}));
  EXPECT_THROW(BalancedSizes(3, 0), std::invalid_argument);
}

// Fig. 4: two batches of four tokens, one MoE layer of four experts. Each input batch
// touches all four experts (8 in all); regrouped, each new batch touches two (4 in all).
TEST(TokenRegrouping, FigureFourTwoBatchesHalveTheActivatedExperts) {
  // Batch 1: {0}, {2,3}, {1}, {2}; batch 2: {0,1}, {3}, {0,1}, {2,3}.
  const auto paths = OneLayer(4, {{0}, {2, 3}, {1}, {2}, {0, 1}, {3}, {0, 1}, {2, 3}});
  const std::vector<int> input = ContiguousGroups(8, 2);
  for (uint64_t seed = 0; seed < 16; ++seed) {
    RegroupOptions o;
    o.seed = seed;
    const RegroupResult r = RegroupTokens(paths, input, o);
    EXPECT_EQ(r.before, 8);
    EXPECT_EQ(r.after, 4) << "seed " << seed;
    EXPECT_TRUE(r.changed);
    EXPECT_EQ(GroupSizes(r.group, 2), (std::vector<int>{4, 4}));
    // The new batches are {experts 0,1} and {experts 2,3}.
    for (int t : {0, 2, 4, 6}) EXPECT_EQ(r.group[t], r.group[0]) << "token " << t;
    for (int t : {1, 3, 5, 7}) EXPECT_NE(r.group[t], r.group[0]) << "token " << t;
  }
}

// Recursive bisection separates clusters that pair up: A = {0,1} and B = {1,2} share an
// expert, as do C = {4,5} and D = {5,6}; the first cut splits {A,B} from {C,D}, the second
// each pair. (Clusters all at one distance from each other tie at the first cut: the
// heuristic has nothing to rank them by; the safeguard then keeps what is not better.)
TEST(TokenRegrouping, FourGroupsByRecursiveBisectionFindPairedClusters) {
  // Token i belongs to cluster i % 4; tokens 4-7 route to their cluster's first expert only.
  const std::vector<std::vector<int>> pairs = {{0, 1}, {1, 2}, {4, 5}, {5, 6}};
  std::vector<std::vector<int>> tokens;
  for (int i = 0; i < 12; ++i)
    tokens.push_back(i / 4 == 1 ? std::vector<int>{pairs[i % 4][0]} : pairs[i % 4]);
  const auto paths = OneLayer(8, tokens);
  for (uint64_t seed = 0; seed < 16; ++seed) {
    RegroupOptions o;
    o.groups = 4;
    o.seed = seed;
    const RegroupResult r = RegroupTokens(paths, ContiguousGroups(12, 4), o);
    // Contiguous groups of three: tokens 0-2 {0,1,2,4,5} = 5; 3-5 {5,6},{0},{1} = 4;
    // 6-8 {4},{5},{0,1} = 4; 9-11 {1,2},{4,5},{5,6} = 5.
    EXPECT_EQ(r.before, 18);
    EXPECT_EQ(r.after, 4 * 2) << "seed " << seed;
    EXPECT_EQ(GroupSizes(r.group, 4), (std::vector<int>{3, 3, 3, 3}));
    for (int i = 0; i < 12; ++i) EXPECT_EQ(r.group[i], r.group[i % 4]) << "token " << i;
  }
}

TEST(TokenRegrouping, KeepsTheInputSplitWhenItIsAlreadyBest) {
  // Already grouped by expert: nothing to gain, nothing moves.
  const auto paths = OneLayer(4, {{0}, {0}, {0}, {3}, {3}, {3}});
  const std::vector<int> input = {0, 0, 0, 1, 1, 1};
  const RegroupResult r = RegroupTokens(paths, input, {});
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(r.group, input);
  EXPECT_EQ(r.before, 2);
  EXPECT_EQ(r.after, 2);
}

// Random paths (top-k of E per layer), any count and group number: sizes are balanced, the
// objective never rises against the input split, and the result is what it reports.
TEST(TokenRegrouping, BalancedAndNeverWorseOnRandomCases) {
  std::mt19937 rng(7);
  int improved = 0;
  for (int c = 0; c < 300; ++c) {
    const int n = 1 + static_cast<int>(rng() % 40);
    const int groups = 1 + static_cast<int>(rng() % 5);
    const int layers = 1 + static_cast<int>(rng() % 4), experts = 4 + static_cast<int>(rng() % 70);
    const int top_k = 1 + static_cast<int>(rng() % 3);
    std::vector<RoutingPath> paths;
    for (int i = 0; i < n; ++i) {
      RoutingPath p(layers, experts);
      for (int l = 0; l < layers; ++l)
        for (int k = 0; k < top_k; ++k) p.Set(l, static_cast<int>(rng() % (experts / 2 + 1)));
      paths.push_back(p);
    }
    // Input: a random balanced split.
    std::vector<int> input = ContiguousGroups(n, groups);
    std::shuffle(input.begin(), input.end(), rng);
    RegroupOptions o;
    o.groups = groups;
    o.seed = c;
    const RegroupResult r = RegroupTokens(paths, input, o);
    ASSERT_EQ(r.group.size(), static_cast<size_t>(n));
    EXPECT_LE(r.after, r.before) << "case " << c;
    EXPECT_EQ(r.after, ActivatedExperts(paths, r.group, groups)) << "case " << c;
    EXPECT_EQ(r.changed, r.after < r.before) << "case " << c;
    if (!r.changed) {
      EXPECT_EQ(r.group, input) << "case " << c;
    }
    const std::vector<int> sizes = GroupSizes(BalancedGroups(paths, o), groups);
    EXPECT_EQ(sizes, BalancedSizes(n, groups)) << "case " << c;
    const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
    EXPECT_LE(*hi - *lo, 1) << "case " << c;
    improved += r.changed;
  }
  EXPECT_GT(improved, 100);  // The clustering does find better splits on most cases.
}

TEST(TokenRegrouping, DeterministicGivenTheSeed) {
  std::mt19937 rng(11);
  std::vector<RoutingPath> paths;
  for (int i = 0; i < 31; ++i) {
    RoutingPath p(3, 16);
    for (int l = 0; l < 3; ++l)
      for (int k = 0; k < 2; ++k) p.Set(l, static_cast<int>(rng() % 16));
    paths.push_back(p);
  }
  RegroupOptions o;
  o.groups = 3;
  o.seed = 42;
  const std::vector<int> first = BalancedGroups(paths, o);
  for (int run = 0; run < 3; ++run) EXPECT_EQ(BalancedGroups(paths, o), first);
}

TEST(TokenRegrouping, RefusesMismatchedInputs) {
  std::vector<RoutingPath> paths = {RoutingPath(1, 4), RoutingPath(1, 5)};
  EXPECT_THROW(BalancedGroups(paths, {}), std::invalid_argument);  // Shapes differ.
  const auto same = OneLayer(4, {{0}, {1}});
  EXPECT_THROW(RegroupTokens(same, std::vector<int>{0}, {}), std::invalid_argument);
  RegroupOptions zero;
  zero.groups = 0;
  EXPECT_THROW(RegroupTokens(same, std::vector<int>{0, 0}, zero), std::invalid_argument);
  EXPECT_TRUE(BalancedGroups({}, {}).empty());
}

}  // namespace
}  // namespace moex::policy

namespace moex::policy {
namespace {

// The `regroup` policy builds each request's path from the events: requests 0 and 2 route
// to experts {0,1} of both layers, 1 and 3 to {2,3}; offered in admission order (0,1 | 2,3),
// it regroups them into {0,2} and {1,3}.
TEST(RegroupPolicy, RegroupsRequestsByTheirLastPaths) {
  PolicyFacts f;
  f.num_layers = 2;
  f.moe_layer = {1, 1};
  f.num_experts = 6;
  f.top_k = 2;
  std::unique_ptr<Policy> p = MakePolicy("regroup", f);
  Decisions d;
  const std::vector<int32_t> prompt = {1, 2};
  for (int64_t r = 0; r < 4; ++r) p->OnRequestBegin({r, prompt.data(), 2}, &d);
  const std::vector<int64_t> requests = {0, 1, 2, 3}, counts = {1, 1, 1, 1};
  const std::vector<int32_t> tokens = {5, 6, 7, 8};
  IterationBeginEvent it;
  it.n_requests = 4;
  it.requests = requests.data();
  it.token_counts = counts.data();
  it.tokens = tokens.data();
  it.n_tokens = 4;
  p->OnIterationBegin(it, &d);
  const std::vector<int32_t> ids = {0, 1, 2, 3, 1, 0, 3, 2};  // Two per token.
  for (int layer = 0; layer < 2; ++layer) {
    GateEvent g;
    g.layer = layer;
    g.n_tokens = 4;
    g.top_k = 2;
    g.num_experts = 6;
    g.ids = ids.data();
    p->OnGate(testing::Routed(g), &d);
  }
  p->OnIterationEnd(&d);
  std::vector<PassCandidate> candidates;
  for (int64_t r = 0; r < 4; ++r) candidates.push_back({r, &tokens[r], 1});
  std::vector<int> group = ContiguousGroups(4, 2);
  ASSERT_TRUE(p->RegroupPasses(candidates, 2, &group));
  EXPECT_EQ(group[0], group[2]);
  EXPECT_EQ(group[1], group[3]);
  EXPECT_NE(group[0], group[1]);
  // A request that has not run yet has an empty path (nothing to raise over).
  const std::vector<int32_t> other = {9, 9, 9};
  p->OnRequestBegin({4, other.data(), 3}, &d);
  candidates.push_back({4, other.data(), 3});
  std::vector<int> five = ContiguousGroups(5, 2);
  ASSERT_TRUE(p->RegroupPasses(candidates, 2, &five));
  EXPECT_EQ(five[0], five[2]);
  EXPECT_EQ(five[1], five[3]);
  candidates.pop_back();
  // One group: nothing to regroup.
  std::vector<int> one(4, 0);
  EXPECT_FALSE(p->RegroupPasses(candidates, 1, &one));
}

}  // namespace
}  // namespace moex::policy

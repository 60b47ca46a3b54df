// MoE-Infinity (src/policy/moe_infinity/moe_infinity.h): the paper's worked examples and the
// policy's mechanisms, hand-computed. Figures and sections refer to the paper
// (../shared/papers/moe-infinity.txt). The registry's conformance tests cover the rest
// (lossless, simulator = engine, determinism, state).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "policy/moe_infinity/eam_collection.h"
#include "policy/moe_infinity/expert_activation_matrix.h"
#include "policy/moe_infinity/moe_infinity.h"
#include "policy/moe_infinity/moe_infinity_priority.h"
#include "policy/policy_state.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"
#include "support/policy_events.h"

namespace moex::policy {
namespace {

using Eam = ExpertActivationMatrix;
using Phase = MoeInfinityPolicy::Phase;

// ---------------------------------------------------------------------------------------
// Cosine distance (§4.2).

TEST(MoeInfinityCosine, IdenticalScaledOrthogonalAndZero) {
  const std::vector<float> a = {1, 2, 0, 3}, twice = {2, 4, 0, 6}, other = {0, 0, 5, 0};
  const std::vector<float> zero = {0, 0, 0, 0};
  EXPECT_NEAR(CosineDistance(a, a), 0.0, 1e-12);
  EXPECT_NEAR(CosineDistance(a, twice), 0.0, 1e-12);  // Scale-free: counts of k·n tokens.
  EXPECT_DOUBLE_EQ(CosineDistance(a, other), 1.0);
  // The zero-vector guard: no direction, like nothing, never NaN.
  EXPECT_DOUBLE_EQ(CosineDistance(a, zero), 1.0);
  EXPECT_DOUBLE_EQ(CosineDistance(zero, zero), 1.0);
  // 1 - (1*1 + 2*1) / (sqrt(14) * sqrt(2)) = 1 - 3 / sqrt(28).
  EXPECT_NEAR(CosineDistance(a, std::vector<float>{1, 1, 0, 0}), 1.0 - 3.0 / std::sqrt(28.0),
              1e-12);
}

TEST(MoeInfinityCosine, ShapesMustAgree) {
  EXPECT_THROW(CosineDistance(std::vector<float>{1, 2}, std::vector<float>{1, 2, 3}), Error);
  EXPECT_THROW(CosineDistance(Eam(2, 3), Eam(3, 2)), Error);
  EXPECT_THROW(Eam::FromRows({{1, 2}, {1}}), Error);
  Eam m(2, 2);
  EXPECT_THROW(m.Add(Eam(2, 3)), Error);
}

// ---------------------------------------------------------------------------------------
// The EAM collection (§4.2, Fig. 5).

// Four request EAMs of the 3-layer, 2-expert model of Fig. 1 (flattened):
// EAM1 = (3,0,3,0,3,0), EAM2 = (0,3,3,0,0,3), EAM3 = (1,2,0,3,0,3), EAM4 = (0,3,0,3,0,3).
// |EAM4| = sqrt(27). EAM4·EAM1 = 0 (distance 1); EAM4·EAM2 = 18, |EAM2| = sqrt(27), distance
// 1 - 18/27 = 1/3; EAM4·EAM3 = 6 + 9 + 9 = 24, |EAM3| = sqrt(23), distance
// 1 - 24 / sqrt(27 * 23) = 0.0369. EAM3 is the most similar, so EAM4 replaces it.
const Eam kEam1 = Eam::FromRows({{3, 0}, {3, 0}, {3, 0}});
const Eam kEam2 = Eam::FromRows({{0, 3}, {3, 0}, {0, 3}});
const Eam kEam3 = Eam::FromRows({{1, 2}, {0, 3}, {0, 3}});
const Eam kEam4 = Eam::FromRows({{0, 3}, {0, 3}, {0, 3}});

TEST(MoeInfinityEamc, Figure5ReplacesTheMostSimilarEntry) {
  EamCollection c(3, 2, 3);
  EXPECT_EQ(c.Insert(kEam1), 0);
  EXPECT_EQ(c.Insert(kEam2), 1);
  EXPECT_EQ(c.Insert(kEam3), 2);
  EXPECT_EQ(c.size(), 3);
  const std::vector<double> d = c.Distances(kEam4);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NEAR(d[0], 1.0, 1e-9);
  EXPECT_NEAR(d[1], 1.0 / 3.0, 1e-6);
  EXPECT_NEAR(d[2], 1.0 - 24.0 / std::sqrt(27.0 * 23.0), 1e-6);
  EXPECT_EQ(c.Insert(kEam4), 2);  // EAM3's slot.
  EXPECT_EQ(c.size(), 3);
  EXPECT_NEAR(CosineDistance(c.Entry(2), kEam4), 0.0, 1e-12);
  EXPECT_NEAR(CosineDistance(c.Entry(0), kEam1), 0.0, 1e-12);
  EXPECT_NEAR(CosineDistance(c.Entry(1), kEam2), 0.0, 1e-12);
}

TEST(MoeInfinityEamc, ZeroEamsAreNotStoredAndTiesReplaceTheOldest) {
  EamCollection c(3, 2, 2);
  EXPECT_EQ(c.Insert(Eam(3, 2)), -1);
  EXPECT_EQ(c.size(), 0);
  EXPECT_EQ(c.Insert(kEam1), 0);
  EXPECT_EQ(c.Insert(kEam1), 1);
  // Both entries are at distance 0 from a third copy: the older (slot 0) goes.
  EXPECT_EQ(c.Insert(kEam1), 0);
  EXPECT_GT(c.Stamp(0), c.Stamp(1));
  EXPECT_THROW(c.Insert(Eam(2, 2)), Error);
  EXPECT_THROW(EamCollection(3, 2, 0), Error);
}

TEST(MoeInfinityEamc, SavedCollectionLoadsBack) {
  EamCollection c(3, 2, 3);
  for (const Eam* m : {&kEam1, &kEam2, &kEam3, &kEam4}) c.Insert(*m);
  StateWriter w;
  c.Save(w);
  EamCollection back(3, 2, 3);
  StateReader r({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "test");
  back.Load(r);
  EXPECT_TRUE(r.at_end());
  ASSERT_EQ(back.size(), 3);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(back.Stamp(k), c.Stamp(k));
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) EXPECT_EQ(back.Cell(k, i, j), c.Cell(k, i, j));
  }
  // A collection of another shape, or one too big for the capacity, is refused.
  EamCollection wrong(2, 2, 3), small(3, 2, 2);
  StateReader r2({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "test");
  EXPECT_THROW(wrong.Load(r2), Error);
  StateReader r3({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "test");
  EXPECT_THROW(small.Load(r3), Error);
  StateReader cut({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size() / 2},
                  "test");
  EXPECT_THROW(back.Load(cut), Error);
}

// The query over the rows seen so far, against EAM1..EAM3:
// row 0 = (0,1): EAM1 shares nothing (excluded); EAM2 row 0 = (0,3), distance 0; EAM3 row
//   0 = (1,2), distance 1 - 2/sqrt(5). Over the whole vectors instead: EAM2 1 - 3/sqrt(27),
//   EAM3 1 - 2/sqrt(23), still EAM2 first.
// rows 0-1 = (0,1,0,1): EAM2 (0,3,3,0) gives 3 / (sqrt(2) sqrt(18)) = 1/2, distance 1/2; EAM3
//   (1,2,0,3) gives 5 / (sqrt(2) sqrt(14)), distance 0.0551: EAM3 is now the nearest.
TEST(MoeInfinityEamc, IncrementalQueryOverTheObservedRows) {
  EamCollection c(3, 2, 3);
  c.Insert(kEam1);
  c.Insert(kEam2);
  c.Insert(kEam3);
  EamcMatcher q;
  q.AddRow(c, 0, std::vector<float>{0, 1});
  auto near = q.Nearest(c, 3, true);
  ASSERT_EQ(near.size(), 2u);
  EXPECT_EQ(near[0].slot, 1);
  EXPECT_NEAR(near[0].distance, 0.0, 1e-6);
  EXPECT_EQ(near[1].slot, 2);
  EXPECT_NEAR(near[1].distance, 1.0 - 2.0 / std::sqrt(5.0), 1e-6);
  auto all = q.Nearest(c, 3, false);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_NEAR(all[0].distance, 1.0 - 3.0 / std::sqrt(27.0), 1e-6);
  EXPECT_NEAR(all[1].distance, 1.0 - 2.0 / std::sqrt(23.0), 1e-6);

  q.AddRow(c, 1, std::vector<float>{0, 1});
  near = q.Nearest(c, 1, true);
  ASSERT_EQ(near.size(), 1u);
  EXPECT_EQ(near[0].slot, 2);
  EXPECT_NEAR(near[0].distance, 1.0 - 5.0 / std::sqrt(28.0), 1e-6);

  // The collection changes: the kept rows are matched again. EAM4 replaced EAM3; the query
  // is now (0,1,0,1,0,0) over rows 0-2: EAM4 gives 6 / (sqrt(2) sqrt(27)), EAM2 3 / (sqrt(2)
  // sqrt(27)).
  c.Insert(kEam4);
  q.AddRow(c, 2, std::vector<float>{0, 0});
  near = q.Nearest(c, 2, true);
  ASSERT_EQ(near.size(), 2u);
  EXPECT_EQ(near[0].slot, 2);
  EXPECT_NEAR(near[0].distance, 1.0 - 6.0 / std::sqrt(54.0), 1e-6);
  EXPECT_EQ(near[1].slot, 1);
  EXPECT_NEAR(near[1].distance, 1.0 - 3.0 / std::sqrt(54.0), 1e-6);
  // An earlier row starts a new query.
  q.AddRow(c, 0, std::vector<float>{1, 0});
  EXPECT_EQ(q.last_layer(), 0);
  EXPECT_EQ(q.Nearest(c, 1, true)[0].slot, 0);
  EXPECT_THROW(q.AddRow(c, 3, std::vector<float>{1, 0}), Error);
  EXPECT_THROW(q.AddRow(c, 1, std::vector<float>{1, 0, 0}), Error);
}

// The incremental query agrees with a brute-force cosine over masked vectors.
TEST(MoeInfinityEamc, IncrementalQueryEqualsBruteForce) {
  const int L = 6, E = 16, n = 40;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> expert(0, E - 1), count(0, 3);
  EamCollection c(L, E, n);
  std::vector<Eam> stored;
  for (int k = 0; k < n; ++k) {
    Eam m(L, E);
    for (int i = 0; i < L; ++i)
      for (int t = 0; t < 4; ++t) m.Add(i, expert(rng), static_cast<float>(count(rng)));
    c.Insert(m);
    stored.push_back(m);
  }
  Eam query(L, E);
  EamcMatcher q;
  for (int l = 0; l < L; ++l) {
    std::vector<float> row(E, 0.0f);
    for (int t = 0; t < 2; ++t) row[static_cast<size_t>(expert(rng))] += 1;
    for (int j = 0; j < E; ++j) query.Add(l, j, row[static_cast<size_t>(j)]);
    q.AddRow(c, l, row);
    const auto near = q.Nearest(c, n, true);
    for (const auto& m : near) {
      std::vector<float> a, b;
      for (int i = 0; i <= l; ++i)
        for (int j = 0; j < E; ++j) {
          a.push_back(query.at(i, j));
          b.push_back(stored[static_cast<size_t>(m.slot)].at(i, j));
        }
      EXPECT_NEAR(m.distance, CosineDistance(a, b), 1e-5);
    }
    for (size_t i = 1; i < near.size(); ++i) EXPECT_LE(near[i - 1].distance, near[i].distance);
  }
}

// ---------------------------------------------------------------------------------------
// Priorities (§5.1 Fig. 6-7, §5.2).

// Four layers, two experts; the current layer is the second (paper's layer 2, ordinal 1).
// Summed matches: layer 3 (1,1), layer 4 (2,3). Row-normalised: 0.5, 0.5 and 0.4, 0.6.
// Proximity: layer 3 x (1 - 1/4) = 0.375 each, layer 4 x (1 - 2/4): 0.2 and 0.3. E[3,2]
// (0.375) goes before E[4,2] (0.3) although its probability (0.5) is lower (0.6).
TEST(MoeInfinityPriority, ProximityPutsTheNearerExpertFirst) {
  const Eam sum = Eam::FromRows({{7, 7}, {9, 9}, {1, 1}, {2, 3}});
  const auto p = PrefetchPriorities(sum, 1, 0, true);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].layer, 2);
  EXPECT_EQ(p[0].expert, 0);
  EXPECT_DOUBLE_EQ(p[0].priority, 0.375);
  EXPECT_EQ(p[1].layer, 2);  // E[3,2]
  EXPECT_EQ(p[1].expert, 1);
  EXPECT_DOUBLE_EQ(p[1].priority, 0.375);
  EXPECT_EQ(p[2].layer, 3);  // E[4,2]
  EXPECT_EQ(p[2].expert, 1);
  EXPECT_NEAR(p[2].priority, 0.3, 1e-12);
  EXPECT_NEAR(p[3].priority, 0.2, 1e-12);
  // Without proximity the likelier, farther E[4,2] (0.6) comes first.
  const auto flat = PrefetchPriorities(sum, 1, 0, false);
  EXPECT_EQ(flat[0].layer, 3);
  EXPECT_EQ(flat[0].expert, 1);
  EXPECT_NEAR(flat[0].priority, 0.6, 1e-12);
  // Next layer only; zero rows predict nothing; the last layer has no future.
  EXPECT_EQ(PrefetchPriorities(sum, 1, 1, true).size(), 2u);
  EXPECT_TRUE(PrefetchPriorities(Eam::FromRows({{1, 0}, {0, 0}}), 0, 0, true).empty());
  EXPECT_TRUE(PrefetchPriorities(sum, 3, 0, true).empty());
}

TEST(MoeInfinityPriority, InitialLayersWeighMore) {
  // count x (1 + boost (1 - i/L)), L = 4, boost 1: layer 0 x2, layer 2 x1.5, layer 3 x1.25.
  EXPECT_DOUBLE_EQ(CachePriority(3, 0, 4, 1), 6);
  EXPECT_DOUBLE_EQ(CachePriority(3, 2, 4, 1), 4.5);
  EXPECT_DOUBLE_EQ(CachePriority(3, 3, 4, 1), 3.75);
  EXPECT_DOUBLE_EQ(CachePriority(3, 3, 4, 0), 3);
  EXPECT_DOUBLE_EQ(CachePriority(0, 0, 4, 1), 0);
}

// ---------------------------------------------------------------------------------------
// The policy, driven event by event with a synchronous worker (as the simulator does).

class Harness {
 public:
  explicit Harness(MoeInfinityOptions o = {}, int capacity = 3, int layers = 3, int experts = 2) {
    facts_.num_layers = layers;
    facts_.moe_layer.assign(static_cast<size_t>(layers), 1);
    facts_.num_experts = experts;
    facts_.top_k = 1;
    facts_.neurons = 16;
    facts_.chunk_neurons = 16;
    facts_.capacity_experts = capacity;
    facts_.worker = &worker_;
    policy = std::make_unique<MoeInfinityPolicy>(facts_, o);
  }
  void Begin(int64_t request, int64_t prompt_len) {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len), 1);
    Decisions d;
    policy->OnRequestBegin({request, prompt.data(), prompt_len}, &d);
  }
  void StartPass(std::vector<int64_t> requests, std::vector<int64_t> counts) {
    requests_ = std::move(requests);
    counts_ = std::move(counts);
    IterationBeginEvent e;
    e.n_requests = static_cast<int64_t>(requests_.size());
    e.requests = requests_.data();
    e.token_counts = counts_.data();
    Decisions d;
    policy->OnIterationBegin(e, &d);
  }
  // One routed expert per token (top-1).
  Decisions Gate(int layer, std::vector<int32_t> ids) {
    ids_ = std::move(ids);
    GateEvent g;
    g.layer = layer;
    g.n_tokens = static_cast<int64_t>(ids_.size());
    g.top_k = 1;
    g.num_experts = facts_.num_experts;
    g.ids = ids_.data();
    Decisions d;
    policy->OnGate(testing::Routed(g), &d);
    worker_.Poll(&d);
    return d;
  }
  Decisions Done(int layer, int expert) {
    Decisions d;
    policy->OnExpertDone({layer, expert}, &d);
    return d;
  }
  void EndPass() {
    Decisions d;
    policy->OnIterationEnd(&d);
  }
  void End(int64_t request) {
    Decisions d;
    policy->OnRequestEnd({request}, &d);
  }
  // A whole pass of one request: token t routes to routes[layer][t].
  void Pass(int64_t request, const std::vector<std::vector<int32_t>>& routes) {
    StartPass({request}, {static_cast<int64_t>(routes[0].size())});
    for (size_t l = 0; l < routes.size(); ++l) {
      Gate(static_cast<int>(l), routes[l]);
      for (int32_t id : std::set<int32_t>(routes[l].begin(), routes[l].end()))
        Done(static_cast<int>(l), id);
    }
    EndPass();
  }
  // A request of one prompt token (routed to expert 0 everywhere) and the given decode
  // passes (one expert id per layer each).
  void Request(int64_t request, const std::vector<std::vector<int32_t>>& decode) {
    Begin(request, 1);
    Pass(request, {{0}, {0}, {0}});
    for (const auto& pass : decode) Pass(request, {{pass[0]}, {pass[1]}, {pass[2]}});
    End(request);
  }
  PolicyFacts facts_;
  PolicyWorker worker_{PolicyWorker::Mode::kSync};
  std::unique_ptr<MoeInfinityPolicy> policy;

 private:
  std::vector<int64_t> requests_, counts_;
  std::vector<int32_t> ids_;
};

double Priority(const Decisions& d, ExpertKey k) {
  for (const Prefetch& p : d.prefetch)
    if (p.expert == k) return p.priority;
  return -1;
}
bool Has(const std::vector<ExpertKey>& keys, ExpertKey k) {
  return std::find(keys.begin(), keys.end(), k) != keys.end();
}

// Fig. 8: decode passes routing (E[1,1], E[2,2], E[3,2]) once and (E[1,2], E[2,2], E[3,2])
// twice give the request EAM [[1,2],[0,3],[0,3]]; the prompt's pass is traced apart.
// With boost 1 and L = 3 the cache priorities are count x (2, 5/3, 4/3): E[1,1] 2, E[1,2] 4,
// E[2,1] 0, E[2,2] 5, E[3,1] 0, E[3,2] 4 — E[2,2] is kept before everything else (Fig. 8c),
// where LRU would evict it first (it was used before E[3,2] in every pass).
TEST(MoeInfinityPolicy, Figure8RequestEamAndCachePriorities) {
  Harness h;
  h.Begin(1, 2);
  h.Pass(1, {{0, 0}, {0, 1}, {1, 1}});  // Prefill: two prompt tokens.
  const std::vector<std::vector<int32_t>> decode = {{0, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  for (const auto& p : decode) h.Pass(1, {{p[0]}, {p[1]}, {p[2]}});
  const Eam* req = h.policy->RequestEam(1, Phase::kDecode);
  ASSERT_NE(req, nullptr);
  EXPECT_NEAR(CosineDistance(*req, kEam3), 0.0, 1e-12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(req->at(i, j), kEam3.at(i, j));
  const Eam* prompt = h.policy->RequestEam(1, Phase::kPrefill);
  EXPECT_EQ(prompt->at(0, 0), 2);
  EXPECT_EQ(prompt->at(1, 1), 1);
  EXPECT_EQ(prompt->at(2, 1), 2);

  // The next decode pass uses the request EAM accumulated so far.
  h.StartPass({1}, {1});
  auto score = [&](int l, int e) { return h.policy->EvictScore({l, e}); };
  EXPECT_NEAR(score(0, 0), 2, 1e-5);
  EXPECT_NEAR(score(0, 1), 4, 1e-5);
  EXPECT_NEAR(score(1, 0), 0, 1e-5);
  EXPECT_NEAR(score(1, 1), 5, 1e-5);
  EXPECT_NEAR(score(2, 0), 0, 1e-5);
  EXPECT_NEAR(score(2, 1), 4, 1e-5);
  // Equal counts: the more recently used goes last (E[3,2] was touched after E[1,2]).
  h.policy->OnTouch({0, 1}, true);
  h.policy->OnTouch({2, 1}, true);
  EXPECT_GT(score(2, 1), score(0, 1));
}

// The three priority resets of §5.2 and the re-prioritisation of §5.1.
// Learned decode EAMs: B = [[3,0],[0,3],[0,3]] then A = [[3,0],[3,0],[3,0]] (A newer).
// Decode pass of a new request:
//  gate 0 routes E[1,1]: rows 0 of A and B are both (3,0): distance 0, the newer A wins.
//    A predicts E[2,1] with 1 x (1 - 1/3) = 2/3 and E[3,1] with 1 x (1 - 2/3) = 1/3; K =
//    3 slots - 1 routed = 2: both prefetched, highest first, and protected.
//  gate 1 routes E[2,2]: E[2,1] was prefetched and not used (case ii): unprotected and
//    cancelled. Query (1,0,0,1): A (3,0,3,0) cos 1/2, B (3,0,0,3) cos 1: B predicts E[3,2]
//    with 1 x (1 - 1/3) = 2/3, which is prefetched; E[3,1] left the top K (case iii): its
//    queued reads fall to priority 0 (no longer predicted) and it is unprotected.
//  gate 2 routes E[3,2]: used (case i), unprotected, not cancelled.
TEST(MoeInfinityPolicy, PrefetchReprioritiseAndTheThreeResets) {
  Harness h;
  h.policy->OnLearnBegin();
  h.Request(10, {{0, 1, 1}, {0, 1, 1}, {0, 1, 1}});  // B
  h.Request(11, {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}});  // A
  h.policy->OnLearnEnd();
  EXPECT_EQ(h.policy->Collection(Phase::kDecode).size(), 2);
  EXPECT_EQ(h.policy->Collection(Phase::kPrefill).size(), 2);

  h.Begin(1, 1);
  h.Pass(1, {{0}, {0}, {0}});
  h.StartPass({1}, {1});
  Decisions d = h.Gate(0, {0});
  ASSERT_EQ(d.prefetch.size(), 2u);
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{1, 0}));
  EXPECT_NEAR(d.prefetch[0].priority, 2.0 / 3, 1e-9);
  EXPECT_EQ(d.prefetch[1].expert, (ExpertKey{2, 0}));
  EXPECT_NEAR(d.prefetch[1].priority, 1.0 / 3, 1e-9);
  EXPECT_TRUE(h.policy->IsProtected({1, 0}));
  EXPECT_GE(h.policy->EvictScore({2, 0}), MoeInfinityPolicy::kProtectedScore);
  h.Done(0, 0);

  d = h.Gate(1, {1});
  EXPECT_TRUE(Has(d.cancel, {1, 0}));  // Case ii.
  EXPECT_FALSE(h.policy->IsProtected({1, 0}));
  EXPECT_LT(h.policy->EvictScore({1, 0}), MoeInfinityPolicy::kProtectedScore);
  ASSERT_EQ(d.prefetch.size(), 1u);
  EXPECT_NEAR(Priority(d, {2, 1}), 2.0 / 3, 1e-9);
  ASSERT_EQ(d.reprioritize.size(), 1u);  // Case iii.
  EXPECT_EQ(d.reprioritize[0].expert, (ExpertKey{2, 0}));
  EXPECT_EQ(d.reprioritize[0].priority, 0);
  EXPECT_FALSE(h.policy->IsProtected({2, 0}));
  EXPECT_TRUE(h.policy->IsProtected({2, 1}));
  h.Done(1, 1);

  d = h.Gate(2, {1});
  EXPECT_TRUE(d.cancel.empty());  // Case i: used.
  EXPECT_FALSE(h.policy->IsProtected({2, 1}));
  EXPECT_TRUE(d.prefetch.empty());  // No later layer.
  h.Done(2, 1);
  h.EndPass();
  h.End(1);
  EXPECT_EQ(h.policy->Collection(Phase::kDecode).size(), 3);
}

// A query that grows re-ranks what is queued: an expert predicted again at a new priority
// is re-prioritised, not fetched twice, and one no longer predicted falls to 0.
// Learned decode EAMs (4 layers): R1 = E0 everywhere; R2 (newer) = E0, E1, E0, E1.
//  gate 0 routes E0: both match at distance 0, the newer R2 wins: E[2,1] 1 x (1 - 1/4) =
//    0.75, E[3,0] 1 x (1 - 2/4) = 0.5, E[4,1] 1 x (1 - 3/4) = 0.25.
//  gate 1 routes E0: query (1,0,1,0) is R1 itself: E[3,0] rises to 1 x (1 - 1/4) = 0.75,
//    E[4,0] is new at 0.5, E[4,1] is no longer predicted (0).
TEST(MoeInfinityPolicy, GrowingEamReprioritisesQueuedPrefetches) {
  Harness h({}, 5, 4, 2);
  h.policy->OnLearnBegin();
  for (int64_t r : {1, 2}) {
    h.Begin(r, 1);
    h.Pass(r, {{0}, {0}, {0}, {0}});
    const int32_t x = r == 1 ? 0 : 1;
    h.Pass(r, {{0}, {x}, {0}, {x}});
    h.End(r);
  }
  h.policy->OnLearnEnd();
  h.Begin(3, 1);
  h.Pass(3, {{0}, {0}, {0}, {0}});
  h.StartPass({3}, {1});
  Decisions d = h.Gate(0, {0});
  ASSERT_EQ(d.prefetch.size(), 3u);
  EXPECT_NEAR(Priority(d, {1, 1}), 0.75, 1e-9);
  EXPECT_NEAR(Priority(d, {2, 0}), 0.5, 1e-9);
  EXPECT_NEAR(Priority(d, {3, 1}), 0.25, 1e-9);
  d = h.Gate(1, {0});
  EXPECT_TRUE(Has(d.cancel, {1, 1}));
  ASSERT_EQ(d.prefetch.size(), 1u);
  EXPECT_NEAR(Priority(d, {3, 0}), 0.5, 1e-9);
  ASSERT_EQ(d.reprioritize.size(), 2u);
  for (const Reprioritize& r : d.reprioritize) {
    if (r.expert == ExpertKey{2, 0}) {
      EXPECT_NEAR(r.priority, 0.75, 1e-9);
    } else {
      EXPECT_EQ(r.expert, (ExpertKey{3, 1}));
      EXPECT_EQ(r.priority, 0);
    }
  }
  EXPECT_TRUE(h.policy->IsProtected({2, 0}));
  EXPECT_FALSE(h.policy->IsProtected({3, 1}));
}

TEST(MoeInfinityPolicy, BatchedRequestsKeepTheirOwnEams) {
  Harness h;
  h.Begin(1, 2);
  h.Begin(2, 1);
  // One pass: request 1's two prompt tokens, then request 2's one.
  h.StartPass({1, 2}, {2, 1});
  h.Gate(0, {0, 0, 1});
  h.Gate(1, {1, 0, 1});
  h.Gate(2, {0, 1, 1});
  h.EndPass();
  const Eam* a = h.policy->RequestEam(1, Phase::kPrefill);
  const Eam* b = h.policy->RequestEam(2, Phase::kPrefill);
  EXPECT_EQ(a->at(0, 0), 2);
  EXPECT_EQ(a->at(1, 0), 1);
  EXPECT_EQ(a->at(1, 1), 1);
  EXPECT_EQ(b->at(0, 1), 1);
  EXPECT_EQ(b->at(2, 1), 1);
  EXPECT_EQ(b->RowSum(0), 1);
  EXPECT_TRUE(h.policy->RequestEam(1, Phase::kDecode)->IsZero());
  // Request 2 decodes while request 1 is still in the same pass's prefill... then decodes.
  h.StartPass({1, 2}, {1, 1});
  h.Gate(0, {1, 1});
  h.Gate(1, {1, 1});
  h.Gate(2, {1, 1});
  h.EndPass();
  EXPECT_EQ(h.policy->RequestEam(1, Phase::kDecode)->RowSum(0), 1);
  EXPECT_EQ(h.policy->RequestEam(2, Phase::kDecode)->at(0, 1), 1);
  // A gate that does not match the pass's tokens is an error, not a crash.
  h.StartPass({1}, {1});
  EXPECT_THROW(h.Gate(0, {0, 1}), Error);
  EXPECT_THROW(h.Gate(0, {5}), Error);
}

TEST(MoeInfinityPolicy, AblationModes) {
  {  // Caching disabled: experts leave the cache after use.
    MoeInfinityOptions o;
    o.cache = MoeInfinityCache::kNone;
    Harness h(o);
    h.Begin(1, 1);
    h.StartPass({1}, {1});
    h.Gate(0, {1});
    const Decisions d = h.Done(0, 1);
    ASSERT_EQ(d.retain.size(), 1u);
    EXPECT_EQ(d.retain[0].expert, (ExpertKey{0, 1}));
    EXPECT_EQ(d.retain[0].range.end, 0);
  }
  {  // Dependency prefetching of the next layer: every expert alike.
    MoeInfinityOptions o;
    o.tracing = MoeInfinityTracing::kNone;
    o.lookahead = 1;
    o.proximity = false;
    Harness h(o, 8, 3, 4);
    h.Begin(1, 1);
    h.StartPass({1}, {1});
    const Decisions d = h.Gate(0, {2});
    ASSERT_EQ(d.prefetch.size(), 4u);
    for (const Prefetch& p : d.prefetch) {
      EXPECT_EQ(p.expert.layer, 1);
      EXPECT_DOUBLE_EQ(p.priority, 0.25);
    }
  }
  {  // Model-level tracing: lifetime counts, here of one earlier pass.
    MoeInfinityOptions o;
    o.tracing = MoeInfinityTracing::kModel;
    o.cache = MoeInfinityCache::kModel;
    Harness h(o);
    h.Begin(1, 1);
    h.Pass(1, {{0}, {1}, {1}});
    h.StartPass({1}, {1});
    const Decisions d = h.Gate(0, {0});
    EXPECT_NEAR(Priority(d, {1, 1}), 2.0 / 3, 1e-9);
    EXPECT_NEAR(Priority(d, {2, 1}), 1.0 / 3, 1e-9);
    EXPECT_EQ(d.prefetch.size(), 2u);
    EXPECT_NEAR(h.policy->EvictScore({0, 0}), 1, 1e-5);  // The ended pass routed E[1,1].
  }
  {  // Caching only.
    MoeInfinityOptions o;
    o.prefetch = false;
    Harness h(o);
    h.policy->OnLearnBegin();
    h.Request(1, {{0, 0, 0}});
    h.policy->OnLearnEnd();
    h.Begin(2, 1);
    h.StartPass({2}, {1});
    EXPECT_TRUE(h.Gate(0, {0}).prefetch.empty());
  }
}

TEST(MoeInfinityPolicy, StateRoundTripsAndBadStateIsAnError) {
  Harness h;
  h.Request(1, {{0, 1, 1}, {1, 1, 1}});
  h.Request(2, {{0, 0, 0}});
  StateWriter w;
  h.policy->SaveState(w);
  Harness fresh;
  StateReader r({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "test");
  fresh.policy->LoadState(r);
  r.ExpectEnd();
  StateWriter again;
  fresh.policy->SaveState(again);
  EXPECT_EQ(again.bytes(), w.bytes());
  EXPECT_EQ(fresh.policy->Collection(Phase::kDecode).size(), 2);
  Harness other({}, 3, 4, 2);  // Another model shape.
  StateReader r2({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "test");
  EXPECT_THROW(other.policy->LoadState(r2), Error);
}

TEST(MoeInfinityPolicy, RegisteredWithItsParameters) {
  const PolicyInfo* info = FindPolicy("moe-infinity");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->roles, static_cast<unsigned>(kPrefetches | kEvicts));
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  PolicyFacts f;
  f.num_layers = 2;
  f.moe_layer = {0, 1};  // A dense first layer.
  f.num_experts = 4;
  f.top_k = 2;
  f.capacity_experts = 2;
  f.worker = &worker;
  EXPECT_EQ(MakePolicy("moe-infinity", f)->name(), "moe-infinity");
  EXPECT_EQ(MakePolicy("moe-infinity:eamc=7,matches=3", f)->name(),
            "moe-infinity:eamc=7,matches=3");
  EXPECT_THROW(MakePolicy("moe-infinity:eamc=0", f), Error);
  EXPECT_THROW(MakePolicy("moe-infinity:tracing=psychic", f), Error);
  EXPECT_THROW(MakePolicy("moe-infinity:slots=2", f), Error);
  EXPECT_THROW(MakePolicy("moe-infinity:nosuch=1", f), Error);
}

}  // namespace
}  // namespace moex::policy

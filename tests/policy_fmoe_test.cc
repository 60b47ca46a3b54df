// fMoE (src/policy/fmoe/fmoe.h): the paper's formulas and the policy's mechanisms, hand-computed.
// Sections and equations refer to the paper (../shared/papers/fmoe.txt). The registry's
// conformance tests cover the rest (lossless, simulator = engine, determinism, state).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "policy/fmoe/expert_map_store.h"
#include "policy/fmoe/fmoe.h"
#include "policy/fmoe/fmoe_selection.h"
#include "policy/policy_state.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"
#include "support/policy_events.h"

namespace moex::policy {
namespace {

using Floats = std::vector<float>;

// ---------------------------------------------------------------------------------------
// §4.3: δ_l = clip(1 − score, 0, 1) and Eq. 6–8.

TEST(FmoeSelection, ThresholdClipsOneMinusScore) {
  EXPECT_NEAR(fmoe::SelectionThreshold(0.7), 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(fmoe::SelectionThreshold(1.0), 0.0);
  EXPECT_DOUBLE_EQ(fmoe::SelectionThreshold(1.2), 0.0);   // Clipped at 0.
  EXPECT_DOUBLE_EQ(fmoe::SelectionThreshold(-0.5), 1.0);  // 1.5 clipped at 1.
  EXPECT_DOUBLE_EQ(fmoe::SelectionThreshold(0.0), 1.0);
  EXPECT_DOUBLE_EQ(fmoe::SelectionThreshold(std::nan("")), 1.0);
}

TEST(FmoeSelection, SmallestSetReachingDeltaNeverBelowTopK) {
  const Floats p = {0.1f, 0.4f, 0.2f, 0.3f};
  // δ = 0.5: 0.4 (expert 1) is short, 0.4 + 0.3 (expert 3) = 0.7 reaches it.
  EXPECT_EQ(fmoe::SelectExperts(p.data(), 4, 0.5, 1), (std::vector<int32_t>{1, 3}));
  // δ = 0.35: the top expert alone reaches it.
  EXPECT_EQ(fmoe::SelectExperts(p.data(), 4, 0.35, 1), (std::vector<int32_t>{1}));
  // δ = 0 (a perfect match): exactly top-K (Eq. 8's floor), highest first.
  EXPECT_EQ(fmoe::SelectExperts(p.data(), 4, 0.0, 2), (std::vector<int32_t>{1, 3}));
  // The floor wins over a reached δ: 0.4 ≥ 0.1, but K = 3.
  EXPECT_EQ(fmoe::SelectExperts(p.data(), 4, 0.1, 3), (std::vector<int32_t>{1, 3, 2}));
  // δ = 1 (no similarity): every expert, and never more than J even if rounding leaves the
  // sum a hair below 1.
  EXPECT_EQ(fmoe::SelectExperts(p.data(), 4, 1.0, 1), (std::vector<int32_t>{1, 3, 2, 0}));
  // Ties: the lower id first.
  const Floats tie = {0.25f, 0.25f, 0.5f};
  EXPECT_EQ(fmoe::SelectExperts(tie.data(), 3, 0.0, 2), (std::vector<int32_t>{2, 0}));
}

TEST(FmoeSelection, PrefetchAndEvictionPriorities) {
  // PRI^prefetch = p / (l − l_now).
  EXPECT_NEAR(fmoe::PrefetchPriority(0.6, 3), 0.2, 1e-12);
  EXPECT_NEAR(fmoe::PrefetchPriority(0.6, 1), 0.6, 1e-12);
  EXPECT_THROW(fmoe::PrefetchPriority(0.6, 0), Error);
  // PRI^evict = 1 / (p · freq): the platform evicts the lowest p · freq first.
  EXPECT_DOUBLE_EQ(fmoe::EvictionScore(0.5, 4), 2.0);
  EXPECT_DOUBLE_EQ(fmoe::EvictionScore(0.5, 0), 0.0);  // Never used: PRI^evict = ∞.
}

// ---------------------------------------------------------------------------------------
// §4.4: the Expert Map Store and its redundancy score.

// Three layers of two experts. A = sem (1,0), map (1,0 | 1,0 | 1,0); B = sem (0,1), map
// (0,1 | 0,1 | 0,1); X = sem (0.8,0.6), map (0,1 | 0,1 | 1,0).
// cos(X.sem, A.sem) = 0.8, cos(X.sem, B.sem) = 0.6; cos(X.map, A.map) = 1/3, with B 2/3.
//  d = 1 (weights 1/3, 2/3): RDY(A) = 0.8/3 + 2/9 = 0.4889, RDY(B) = 0.2 + 4/9 = 0.6444: B.
//  d = 2 (weights 2/3, 1/3): RDY(A) = 1.6/3 + 1/9 = 0.6444, RDY(B) = 0.4 + 2/9 = 0.6222: A.
const Floats kSemA = {1, 0}, kMapA = {1, 0, 1, 0, 1, 0};
const Floats kSemB = {0, 1}, kMapB = {0, 1, 0, 1, 0, 1};
const Floats kSemX = {0.8f, 0.6f}, kMapX = {0, 1, 0, 1, 1, 0};

TEST(FmoeStore, RedundancyScoreWeighsSemanticByDOverL) {
  ExpertMapStore d1(3, 2, 2, 1, true);
  EXPECT_EQ(d1.Insert(kSemA, kMapA), 0);
  EXPECT_EQ(d1.Insert(kSemB, kMapB), 1);
  EXPECT_NEAR(d1.Redundancy(kSemX, kMapX, 0), 0.8 / 3 + 2.0 / 9, 1e-6);
  EXPECT_NEAR(d1.Redundancy(kSemX, kMapX, 1), 0.6 / 3 + 4.0 / 9, 1e-6);
  ExpertMapStore d2(3, 2, 2, 2, true);
  d2.Insert(kSemA, kMapA);
  d2.Insert(kSemB, kMapB);
  EXPECT_NEAR(d2.Redundancy(kSemX, kMapX, 0), 1.6 / 3 + 1.0 / 9, 1e-6);
  EXPECT_NEAR(d2.Redundancy(kSemX, kMapX, 1), 0.4 + 2.0 / 9, 1e-6);
}

TEST(FmoeStore, FullStoreReplacesTheMostRedundantMap) {
  ExpertMapStore d1(3, 2, 2, 1, true), d2(3, 2, 2, 2, true);
  for (ExpertMapStore* s : {&d1, &d2}) {
    s->Insert(kSemA, kMapA);
    s->Insert(kSemB, kMapB);
  }
  EXPECT_EQ(d1.Insert(kSemX, kMapX), 1);  // B goes.
  EXPECT_EQ(d2.Insert(kSemX, kMapX), 0);  // A goes.
  EXPECT_EQ(d1.size(), 2);
  EXPECT_EQ(d1.Map(1)[4], 1.0f);
  EXPECT_EQ(d1.Map(0)[0], 1.0f);  // A kept.
  EXPECT_EQ(d1.Sem(1)[0], 0.8f);
  // Equal scores replace the oldest: a second copy of X is at RDY 1 from X only.
  EXPECT_EQ(d1.Insert(kSemX, kMapX), 1);
  ExpertMapStore same(3, 2, 2, 1, true);
  same.Insert(kSemA, kMapA);
  same.Insert(kSemA, kMapA);
  EXPECT_EQ(same.Insert(kSemA, kMapA), 0);
  EXPECT_EQ(same.Insert(kSemA, kMapA), 1);
}

TEST(FmoeStore, WithoutDedupTheOldestGoes) {
  ExpertMapStore s(3, 2, 2, 1, false);
  s.Insert(kSemA, kMapA);
  s.Insert(kSemB, kMapB);
  EXPECT_EQ(s.Insert(kSemB, kMapB), 0);  // A is oldest, though X-like B is more redundant.
  EXPECT_EQ(s.Insert(kSemA, kMapA), 1);
}

TEST(FmoeStore, BadInputIsAnError) {
  ExpertMapStore s(3, 2, 2, 1, true);
  EXPECT_THROW(s.Insert(kSemA, Floats{1, 0}), Error);  // Map of another shape.
  EXPECT_THROW(s.Insert({}, kMapA), Error);            // No embedding.
  s.Insert(kSemA, kMapA);
  EXPECT_THROW(s.Insert(Floats{1, 0, 0}, kMapA), Error);  // Another width.
  EXPECT_THROW(s.MatchSemantic(Floats{1}), Error);
  EXPECT_THROW(ExpertMapStore(3, 2, 0, 1, true), Error);
}

TEST(FmoeStore, SavedStoreLoadsBack) {
  ExpertMapStore s(3, 2, 2, 1, true);
  s.Insert(kSemA, kMapA);
  s.Insert(kSemB, kMapB);
  s.Insert(kSemX, kMapX);
  StateWriter w;
  s.Save(w);
  ExpertMapStore back(3, 2, 2, 1, true);
  StateReader r({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "test");
  back.Load(r);
  EXPECT_TRUE(r.at_end());
  ASSERT_EQ(back.size(), 2);
  for (int y = 0; y < 2; ++y) {
    EXPECT_EQ(back.Stamp(y), s.Stamp(y));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(back.Map(y)[i], s.Map(y)[i]);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(back.Sem(y)[i], s.Sem(y)[i]);
  }
  // The next insertion replaces the same slot in both.
  EXPECT_EQ(back.Insert(kSemA, kMapA), s.Insert(kSemA, kMapA));
  ExpertMapStore wrong(2, 2, 2, 1, true), small(3, 2, 1, 1, true);
  StateReader r2({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "test");
  EXPECT_THROW(wrong.Load(r2), Error);
  StateReader r3({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "test");
  EXPECT_THROW(small.Load(r3), Error);
  StateReader cut({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size() / 2},
                  "test");
  EXPECT_THROW(ExpertMapStore(3, 2, 2, 1, true).Load(cut), Error);
}

// ---------------------------------------------------------------------------------------
// §4.2: the two searches.

TEST(FmoeSearch, SemanticPicksTheClosestEmbeddingTiesTheNewest) {
  ExpertMapStore s(3, 2, 4, 1, true);
  EXPECT_EQ(s.MatchSemantic(kSemA).slot, -1);  // Empty store.
  s.Insert(kSemA, kMapA);
  s.Insert(kSemB, kMapB);
  ExpertMapStore::Match m = s.MatchSemantic(kSemX);
  EXPECT_EQ(m.slot, 0);
  EXPECT_NEAR(m.score, 0.8, 1e-6);
  m = s.MatchSemantic(Floats{-1, -1});  // cos −1/√2 with both: the newer (B).
  EXPECT_EQ(m.slot, 1);
  EXPECT_NEAR(m.score, -1 / std::sqrt(2.0), 1e-6);
}

// A: layer 0 (1,0), layer 1 (1,0); B (newer): layer 0 (0.6,0.8), layer 1 (0,1).
// Query layer 0 (0.9,0.1): cos with A 0.9/0.9055 = 0.9939, with B 0.62/0.9055 = 0.6847: A.
// Query layers 0-1 (0.9,0.1,0.2,0.8): |q|² = 1.5, |A|² = |B|² = 2; A·q = 1.1, B·q = 1.42:
// cos A = 1.1/√3 = 0.6351, cos B = 1.42/√3 = 0.8198: B.
TEST(FmoeSearch, TrajectoryFollowsTheLayersSoFar) {
  ExpertMapStore s(3, 2, 4, 1, true);
  s.Insert(kSemA, Floats{1, 0, 1, 0, 0.5f, 0.5f});
  s.Insert(kSemB, Floats{0.6f, 0.8f, 0, 1, 0.5f, 0.5f});
  TrajectoryMatch t;
  t.Reset(s);
  const Floats q0 = {0.9f, 0.1f}, q1 = {0.2f, 0.8f};
  t.AddLayer(s, 0, q0.data());
  ExpertMapStore::Match m = t.Best(s);
  EXPECT_EQ(m.slot, 0);
  EXPECT_NEAR(m.score, 0.9 / std::sqrt(0.82), 1e-6);
  t.AddLayer(s, 1, q1.data());
  m = t.Best(s);
  EXPECT_EQ(m.slot, 1);
  EXPECT_NEAR(m.score, 1.42 / std::sqrt(3.0), 1e-6);
  EXPECT_THROW(t.AddLayer(s, 0, q0.data()), Error);  // Layers in order only.
  s.Insert(kSemX, kMapX);                            // The store changed: the match is stale.
  EXPECT_TRUE(t.stale(s));
  EXPECT_EQ(t.Best(s).slot, -1);
}

TEST(FmoeSearch, IncrementalTrajectoryEqualsBruteForceCosine) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0, 1);
  const int L = 5, J = 6;
  ExpertMapStore s(L, J, 40, 2, true);
  auto random = [&](size_t n) {
    Floats v(n);
    for (float& x : v) x = u(rng);
    return v;
  };
  for (int y = 0; y < 40; ++y) s.Insert(random(3), random(L * J));
  const Floats q = random(L * J);
  TrajectoryMatch t;
  t.Reset(s);
  for (int l = 0; l < L; ++l) {
    t.AddLayer(s, l, &q[static_cast<size_t>(l) * J]);
    int best = -1;
    double score = -2;
    for (int y = 0; y < s.size(); ++y) {
      const double c = ExpertMapStore::Cosine(q.data(), s.Map(y), static_cast<size_t>(l + 1) * J);
      if (c > score) {
        score = c;
        best = y;
      }
    }
    const ExpertMapStore::Match m = t.Best(s);
    EXPECT_EQ(m.slot, best) << "layer " << l;
    EXPECT_NEAR(m.score, score, 1e-9);
  }
}

// ---------------------------------------------------------------------------------------
// The policy.

class Harness {
 public:
  explicit Harness(FmoeOptions o = {}, int layers = 3, int experts = 4) {
    facts_.num_layers = layers;
    facts_.moe_layer.assign(static_cast<size_t>(layers), 1);
    facts_.num_experts = experts;
    facts_.top_k = 1;
    facts_.neurons = 16;
    facts_.chunk_neurons = 16;
    facts_.capacity_experts = 4;
    facts_.worker = &worker_;
    policy = std::make_unique<FmoePolicy>(facts_, o);
  }
  Decisions StartPass(int64_t request, Floats pooled, int64_t tokens = 1) {
    return StartBatch({request}, {tokens}, std::move(pooled));
  }
  // Requests batched in one pass; `pooled` holds their embeddings one after another.
  Decisions StartBatch(std::vector<int64_t> requests, std::vector<int64_t> counts, Floats pooled) {
    requests_ = std::move(requests);
    counts_ = std::move(counts);
    pooled_ = std::move(pooled);
    IterationBeginEvent e;
    e.n_requests = static_cast<int64_t>(requests_.size());
    e.requests = requests_.data();
    e.token_counts = counts_.data();
    e.pooled = pooled_.data();
    e.d = static_cast<int64_t>(pooled_.size() / requests_.size());
    Decisions d;
    policy->OnIterationBegin(e, &d);
    worker_.Poll(&d);
    return d;
  }
  // `probs`: [tokens × J]; each token routes to its most probable expert (top-1).
  Decisions Gate(int layer, Floats probs) {
    probs_ = std::move(probs);
    const int J = facts_.num_experts;
    ids_.clear();
    for (size_t t = 0; t < probs_.size() / J; ++t) {
      int best = 0;
      for (int j = 1; j < J; ++j)
        if (probs_[t * J + j] > probs_[t * J + best]) best = j;
      ids_.push_back(best);
    }
    GateEvent g;
    g.layer = layer;
    g.n_tokens = static_cast<int64_t>(ids_.size());
    g.top_k = 1;
    g.num_experts = J;
    g.ids = ids_.data();
    g.probs = probs_.data();
    Decisions d;
    policy->OnGate(testing::Routed(g), &d);
    worker_.Poll(&d);
    return d;
  }
  void EndPass() {
    Decisions d;
    policy->OnIterationEnd(&d);
    worker_.Poll(&d);
  }
  void Pass(int64_t request, const Floats& pooled, const std::vector<Floats>& layers) {
    StartPass(request, pooled);
    for (size_t l = 0; l < layers.size(); ++l) Gate(static_cast<int>(l), layers[l]);
    EndPass();
  }
  PolicyFacts facts_;
  PolicyWorker worker_{PolicyWorker::Mode::kSync};
  std::unique_ptr<FmoePolicy> policy;

 private:
  std::vector<int64_t> requests_, counts_;
  Floats pooled_, probs_;
  std::vector<int32_t> ids_;
};

double Priority(const Decisions& d, ExpertKey k) {
  for (const Prefetch& p : d.prefetch)
    if (p.expert == k) return p.priority;
  return -1;
}

// Learned (4 experts, 3 layers, top-1, d = 1):
//   A: sem (1,0), layers (.7,.1,.1,.1) (.1,.7,.1,.1) (.1,.1,.7,.1)
//   B: sem (0,1), layers (.1,.1,.1,.7) (.1,.1,.7,.1) (.7,.1,.1,.1)   (newer)
const std::vector<Floats> kLayersA = {
    {.7f, .1f, .1f, .1f}, {.1f, .7f, .1f, .1f}, {.1f, .1f, .7f, .1f}};
const std::vector<Floats> kLayersB = {
    {.1f, .1f, .1f, .7f}, {.1f, .1f, .7f, .1f}, {.7f, .1f, .1f, .1f}};

FmoeOptions DistanceOne() {
  FmoeOptions o;
  o.distance = 1;
  return o;
}

void Learn(Harness& h) {
  h.policy->OnLearnBegin();
  h.Pass(100, {1, 0}, kLayersA);
  h.Pass(101, {0, 1}, kLayersB);
  h.policy->OnLearnEnd();
}

// Serving a pass with embedding (0.9, 0.1):
//  begin: semantic search → A (cos 0.9939), δ = 0.0061: A's layer 0 top-1 = expert 0,
//    priority p / (l − l_now) = 0.7 / (1 − 0).
//  gate 0 with B's layer 0: trajectory cos with A 0.16/0.52 = 0.31, with B 1 → B, δ = 0:
//    B's layer 1 top-1 = expert 2, priority 0.7 / 1. Layer 0's prefetch is no longer kept.
//  gate 1 with B's layer 1: the trajectory is B's own (cos 1), δ = 0: B's layer 2 top-1 =
//    expert 0.
TEST(FmoePolicy, MatcherChoosesSemanticThenTrajectoryMaps) {
  Harness h(DistanceOne());
  Learn(h);
  EXPECT_EQ(h.policy->Store().size(), 2);
  Decisions d = h.StartPass(1, {0.9f, 0.1f});
  ASSERT_EQ(d.prefetch.size(), 1u);
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{0, 0}));
  EXPECT_NEAR(d.prefetch[0].priority, 0.7, 1e-6);
  EXPECT_TRUE(h.policy->IsProtected({0, 0}));
  EXPECT_GE(h.policy->EvictScore({0, 0}), FmoePolicy::kProtectedScore);

  d = h.Gate(0, kLayersB[0]);
  EXPECT_FALSE(h.policy->IsProtected({0, 0}));
  ASSERT_EQ(d.prefetch.size(), 1u);
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{1, 2}));
  EXPECT_NEAR(d.prefetch[0].priority, 0.7, 1e-6);

  d = h.Gate(1, kLayersB[1]);
  ASSERT_EQ(d.prefetch.size(), 1u);
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{2, 0}));
  d = h.Gate(2, kLayersB[2]);
  EXPECT_TRUE(d.prefetch.empty());  // No layer beyond the last.
  h.EndPass();
  EXPECT_EQ(h.policy->Store().size(), 3);  // Learned online too.
  nlohmann::json report;
  h.policy->ReportJson(&report);
  EXPECT_EQ(report["fmoe"]["semantic_searches"], 1);
  EXPECT_EQ(report["fmoe"]["trajectory_searches"], 2);
  EXPECT_NEAR(report["fmoe"]["mean_semantic_score"].get<double>(), 0.9 / std::sqrt(0.82), 1e-6);
}

// A dissimilar embedding (cos −1/√2 with both, the newer B wins) sets δ = 1: every expert of
// B's layer 0 is prefetched, in descending probability (7 first, ties by id), at p / 1.
TEST(FmoePolicy, LowSimilarityPrefetchesMore) {
  Harness h(DistanceOne());
  Learn(h);
  const Decisions d = h.StartPass(1, {-1, -1});
  ASSERT_EQ(d.prefetch.size(), 4u);
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{0, 3}));
  EXPECT_NEAR(d.prefetch[0].priority, 0.7, 1e-6);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(Priority(d, {0, j}), 0.1, 1e-6);
  // A fixed δ = 0 (the "without δ" ablation) takes top-K only.
  FmoeOptions fixed = DistanceOne();
  fixed.delta = 0;
  Harness f(fixed);
  Learn(f);
  EXPECT_EQ(f.StartPass(1, {-1, -1}).prefetch.size(), 1u);
}

// d = 2: the semantic match guides layers 0 and 1 (priorities p/1 and p/2); gate 0 targets
// layer 2. At gate 0 the queued prefetch of layer 1 moves one layer closer: p / (2 − 1).
TEST(FmoePolicy, DistanceAndReprioritisation) {
  FmoeOptions o;
  o.distance = 2;
  Harness h(o);
  Learn(h);
  Decisions d = h.StartPass(1, {1, 0});  // A, cos 1, δ 0.
  ASSERT_EQ(d.prefetch.size(), 2u);
  EXPECT_NEAR(Priority(d, {0, 0}), 0.7, 1e-6);
  EXPECT_NEAR(Priority(d, {1, 1}), 0.35, 1e-6);
  d = h.Gate(0, kLayersA[0]);
  ASSERT_EQ(d.reprioritize.size(), 1u);
  EXPECT_EQ(d.reprioritize[0].expert, (ExpertKey{1, 1}));
  EXPECT_NEAR(d.reprioritize[0].priority, 0.7, 1e-6);
  ASSERT_EQ(d.prefetch.size(), 1u);  // Trajectory (layer 0 = A's) → A's layer 2: expert 2.
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{2, 2}));
  EXPECT_NEAR(d.prefetch[0].priority, 0.35, 1e-6);
}

// §4.5: outside its prefetch window an expert scores p · freq, p from the matched map of its
// layer (1/J before any): pure LFU at first, then weighted by the map. Serving A's
// embedding sets layer 0's p to A's (.7,.1,.1,.1). Uses: E0 once, E1 three times, E3 twice,
// E2 never: scores .7, .3, 0, .2 → eviction order E2, E3, E1, E0 (LFU alone: E2, E0, E3, E1).
TEST(FmoePolicy, EvictionIsFrequencyTimesMapProbability) {
  Harness h(DistanceOne());
  Learn(h);
  for (auto [e, n] : std::vector<std::pair<int, int>>{{0, 1}, {1, 3}, {3, 2}})
    for (int i = 0; i < n; ++i) h.policy->OnTouch({0, e}, true);
  h.policy->OnTouch({0, 2}, false);                       // A prefetch is no visit.
  EXPECT_NEAR(h.policy->EvictScore({0, 0}), 0.25, 1e-6);  // 1/J x 1.
  EXPECT_NEAR(h.policy->EvictScore({0, 1}), 0.75, 1e-6);
  EXPECT_EQ(h.policy->EvictScore({0, 2}), 0);
  h.StartPass(1, {1, 0});
  h.Gate(0, kLayersA[0]);  // Layer 0's prefetch window closes.
  EXPECT_NEAR(h.policy->GuideProbability({0, 0}), 0.7, 1e-6);
  EXPECT_NEAR(h.policy->EvictScore({0, 0}), 0.7, 1e-6);
  EXPECT_NEAR(h.policy->EvictScore({0, 1}), 0.3, 1e-6);
  EXPECT_EQ(h.policy->EvictScore({0, 2}), 0);
  EXPECT_NEAR(h.policy->EvictScore({0, 3}), 0.2, 1e-6);
}

// §4.1: a pass of several tokens records their mean distribution per layer.
TEST(FmoePolicy, MapIsTheMeanOverThePassTokens) {
  Harness h;
  h.StartPass(1, {1, 2}, 2);
  h.Gate(0, {1, 0, 0, 0, 0, 1, 0, 0});
  h.Gate(1, {0, 0, 1, 0, 0, 0, 1, 0});
  h.Gate(2, {0, 0, 0, 1, 0, 0, 0.5f, 0.5f});
  h.EndPass();
  const ExpertMapStore& s = h.policy->Store();
  ASSERT_EQ(s.size(), 1);
  const Floats want = {.5f, .5f, 0, 0, 0, 0, 1, 0, 0, 0, .25f, .75f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(s.Map(0)[i], want[i]) << i;
  EXPECT_EQ(s.Sem(0)[1], 2.0f);
}

// Two requests in one pass (B = 2) search apart: r1 (embedding of A) gets A's layer 0
// (expert 0), r2 (B's) gets B's (expert 3); the union is prefetched and layer 0's p for
// eviction is the larger of the two maps' (.7, .1, .1, .7). At gate 0 each request's own
// token (A's and B's layer 0) leads its trajectory to A's layer 1 (expert 1) and B's
// (expert 2). Each request's map goes into the store.
TEST(FmoePolicy, BatchedRequestsSearchApart) {
  Harness h(DistanceOne());
  Learn(h);
  Decisions d = h.StartBatch({1, 2}, {1, 1}, {1, 0, 0, 1});
  ASSERT_EQ(d.prefetch.size(), 2u);
  EXPECT_NEAR(Priority(d, {0, 0}), 0.7, 1e-6);
  EXPECT_NEAR(Priority(d, {0, 3}), 0.7, 1e-6);
  Floats tokens = kLayersA[0];
  tokens.insert(tokens.end(), kLayersB[0].begin(), kLayersB[0].end());
  d = h.Gate(0, tokens);
  EXPECT_NEAR(h.policy->GuideProbability({0, 0}), 0.7, 1e-6);
  EXPECT_NEAR(h.policy->GuideProbability({0, 1}), 0.1, 1e-6);
  EXPECT_NEAR(h.policy->GuideProbability({0, 3}), 0.7, 1e-6);
  ASSERT_EQ(d.prefetch.size(), 2u);
  EXPECT_GT(Priority(d, {1, 1}), 0);
  EXPECT_GT(Priority(d, {1, 2}), 0);
  for (int l = 1; l < 3; ++l) {
    Floats both = kLayersA[static_cast<size_t>(l)];
    both.insert(both.end(), kLayersB[static_cast<size_t>(l)].begin(),
                kLayersB[static_cast<size_t>(l)].end());
    h.Gate(l, both);
  }
  h.EndPass();
  const ExpertMapStore& s = h.policy->Store();
  ASSERT_EQ(s.size(), 4);
  for (int l = 0; l < 3; ++l)
    for (int j = 0; j < 4; ++j) {
      EXPECT_FLOAT_EQ(s.Map(2)[l * 4 + j],
                      kLayersA[static_cast<size_t>(l)][static_cast<size_t>(j)]);
      EXPECT_FLOAT_EQ(s.Map(3)[l * 4 + j],
                      kLayersB[static_cast<size_t>(l)][static_cast<size_t>(j)]);
    }
}

// cancel=1: a prefetched expert its gate did not route to is cancelled there.
TEST(FmoePolicy, CancelDropsMispredictedPrefetches) {
  FmoeOptions o = DistanceOne();
  o.cancel = true;
  Harness h(o);
  Learn(h);
  h.StartPass(1, {1, 0});                // Prefetches A's layer-0 expert 0.
  Decisions d = h.Gate(0, kLayersB[0]);  // Routes expert 3.
  ASSERT_EQ(d.cancel.size(), 1u);
  EXPECT_EQ(d.cancel[0], (ExpertKey{0, 0}));
  h.EndPass();
  h.StartPass(2, {1, 0});
  EXPECT_TRUE(h.Gate(0, kLayersA[0]).cancel.empty());  // Routed: kept.
  // The default (the paper's) never cancels.
  Harness keep(DistanceOne());
  Learn(keep);
  keep.StartPass(1, {1, 0});
  EXPECT_TRUE(keep.Gate(0, kLayersB[0]).cancel.empty());
}

TEST(FmoePolicy, AblationsSearchOneWay) {
  // Trajectory only: nothing for the first d layers, then the trajectory's target.
  FmoeOptions t = DistanceOne();
  t.search = FmoeSearch::kTrajectory;
  Harness ht(t);
  Learn(ht);
  EXPECT_TRUE(ht.StartPass(1, {1, 0}).prefetch.empty());
  EXPECT_EQ(ht.Gate(0, kLayersB[0]).prefetch.size(), 1u);
  // Semantic only: A's map guides every layer whatever the gates say.
  FmoeOptions s = DistanceOne();
  s.search = FmoeSearch::kSemantic;
  Harness hs(s);
  Learn(hs);
  Decisions d = hs.StartPass(1, {1, 0});
  ASSERT_EQ(d.prefetch.size(), 1u);
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{0, 0}));
  d = hs.Gate(0, kLayersB[0]);
  ASSERT_EQ(d.prefetch.size(), 1u);
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{1, 1}));  // A's layer 1, not B's.
}

TEST(FmoePolicy, MissingProbabilitiesOrEmbeddingsAreErrors) {
  Harness h;
  IterationBeginEvent e;
  std::vector<int64_t> requests = {1}, counts = {1};
  e.n_requests = 1;
  e.requests = requests.data();
  e.token_counts = counts.data();
  Decisions d;
  EXPECT_THROW(h.policy->OnIterationBegin(e, &d), Error);  // No pooled embedding.
  h.StartPass(1, {1, 0});
  GateEvent g;
  std::vector<int32_t> ids = {0};
  g.layer = 0;
  g.n_tokens = 1;
  g.top_k = 1;
  g.num_experts = 4;
  g.ids = ids.data();
  EXPECT_THROW(h.policy->OnGate(testing::Routed(g), &d), Error);  // No probabilities.
}

TEST(FmoePolicy, StateRoundTripsAndBadStateIsAnError) {
  Harness h(DistanceOne());
  Learn(h);
  StateWriter w;
  h.policy->SaveState(w);
  Harness fresh(DistanceOne());
  StateReader r({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "test");
  fresh.policy->LoadState(r);
  r.ExpectEnd();
  StateWriter again;
  fresh.policy->SaveState(again);
  EXPECT_EQ(again.bytes(), w.bytes());
  // The loaded store guides like the learned one.
  EXPECT_EQ(fresh.StartPass(1, {0.9f, 0.1f}).prefetch.size(), 1u);
  Harness other({}, 4, 4);  // Another model shape.
  StateReader r2({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "test");
  EXPECT_THROW(other.policy->LoadState(r2), Error);
}

TEST(FmoePolicy, RegisteredWithItsParameters) {
  const PolicyInfo* info = FindPolicy("fmoe");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->roles, static_cast<unsigned>(kPrefetches | kEvicts));
  EXPECT_EQ(info->trace_needs, static_cast<unsigned>(kNeedsProbs | kNeedsPooled));
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  PolicyFacts f;
  f.num_layers = 2;
  f.moe_layer = {0, 1};  // A dense first layer.
  f.num_experts = 4;
  f.top_k = 2;
  f.capacity_experts = 2;
  f.worker = &worker;
  EXPECT_EQ(MakePolicy("fmoe", f)->name(), "fmoe");
  EXPECT_EQ(MakePolicy("fmoe:store=7,distance=2", f)->name(), "fmoe:store=7,distance=2");
  EXPECT_THROW(MakePolicy("fmoe:store=0", f), Error);
  EXPECT_THROW(MakePolicy("fmoe:distance=0", f), Error);
  EXPECT_THROW(MakePolicy("fmoe:search=psychic", f), Error);
  EXPECT_THROW(MakePolicy("fmoe:delta=2", f), Error);
  EXPECT_THROW(MakePolicy("fmoe:nosuch=1", f), Error);
}

}  // namespace
}  // namespace moex::policy

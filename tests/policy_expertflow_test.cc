// ExpertFlow (docs/policies/expertflow.md): the paper's 4 × 4 PLEC example, the correction's
// victim order and cancels, the routing-path predictor learning planted rules (token ids
// alone and their context), deterministic training, batch-level accuracy by hand, the path
// offered to token regrouping, and the saved state. The platform's generic tests cover
// lossless serving and simulator == engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "policy/expertflow/expertflow.h"
#include "policy/expertflow/expertflow_predictor.h"
#include "policy/expertflow/plec.h"
#include "policy/expertflow/routing_path_accuracy.h"
#include "policy/policy_state.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"
#include "sim/replay.h"
#include "support/engine_runs.h"
#include "support/policy_events.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"
#include "tiers/offload_metrics.h"
#include "trace/policy_learning.h"
#include "trace/trace_reader.h"
#include "trace/trace_recorder.h"

namespace moex::policy {
namespace {

using Slot = PlecPlan::Slot;

std::vector<std::pair<int, int32_t>> Slots(const std::vector<Slot>& w) {
  std::vector<std::pair<int, int32_t>> out;
  for (const Slot& s : w) out.push_back({s.layer, s.expert});
  return out;
}

TEST(Plec, ThePapersFourByFourExample) {
  // 4 layers x 4 experts, every expert predicted active, a pool of 8.
  PlecPlan plan(4, 4);
  plan.BeginPass({{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}});
  // Layers 1 and 2 (indices 0, 1) fill the pool.
  EXPECT_EQ(Slots(plan.Window(8)),
            (std::vector<std::pair<int, int32_t>>{
                {0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}, {1, 1}, {1, 2}, {1, 3}}));
  plan.Gate(0, {0, 1, 2, 3});
  // Layer 1 still computing: nothing moves.
  EXPECT_EQ(plan.Window(8).front().layer, 0);
  plan.LayerDone(0);
  // Layer 1's slots go to layer 3.
  EXPECT_EQ(Slots(plan.Window(8)),
            (std::vector<std::pair<int, int32_t>>{
                {1, 0}, {1, 1}, {1, 2}, {1, 3}, {2, 0}, {2, 1}, {2, 2}, {2, 3}}));
  // Layer 1's computed experts are now idle, below every planned one.
  EXPECT_EQ(plan.TierOf(0, 2), PlecPlan::kIdle);
  EXPECT_EQ(plan.TierOf(2, 2), PlecPlan::kPlanned);
  EXPECT_LT(plan.Score(0, 2, 1000), plan.Score(2, 2, 0));
  plan.LayerDone(1);
  plan.LayerDone(2);
  EXPECT_EQ(plan.Window(8).size(), 4u);  // Only layer 4 is left.
  plan.EndPass();
  EXPECT_TRUE(plan.Window(8).empty());
  EXPECT_EQ(plan.TierOf(3, 0), PlecPlan::kIdle);
}

TEST(Plec, CorrectionVictimOrder) {
  PlecPlan plan(3, 4);
  plan.BeginPass({{0, 1}, {2, 3}, {0, 3}});
  // Layer 0's gate routes 1 and 2: 0 was mis-prefetched (reported once), 2 was missed.
  EXPECT_EQ(plan.Gate(0, {1, 2}), std::vector<int32_t>{0});
  EXPECT_TRUE(plan.Gate(0, {1, 2}).empty());
  EXPECT_EQ(plan.TierOf(0, 0), PlecPlan::kMisprefetched);
  plan.LayerDone(0);
  // Victims: the mis-prefetch (even used long after), then computed or unpredicted experts
  // by recency, then the planned ones, farthest layer first.
  const double misprefetched = plan.Score(0, 0, 500);
  const double computed_old = plan.Score(0, 1, 10), computed_new = plan.Score(0, 2, 20);
  const double unpredicted = plan.Score(1, 0, 15);
  const double far = plan.Score(2, 0, 0), near = plan.Score(1, 2, 0);
  EXPECT_LT(misprefetched, computed_old);
  EXPECT_LT(computed_old, unpredicted);
  EXPECT_LT(unpredicted, computed_new);
  EXPECT_LT(computed_new, far);
  EXPECT_LT(far, near);
  // Within a layer, the stronger prediction stays longer.
  EXPECT_LT(plan.Score(1, 3, 0), plan.Score(1, 2, 0));
  // The mis-prefetch leaves the window; the rest of the plan fills it.
  EXPECT_EQ(Slots(plan.Window(3)), (std::vector<std::pair<int, int32_t>>{{1, 2}, {1, 3}, {2, 0}}));
}

// ---------------------------------------------------------------------------------------

PolicyFacts FourByFour(PolicyWorker* worker, int experts_per_token, int64_t capacity) {
  PolicyFacts f;
  f.num_layers = 4;
  f.moe_layer.assign(4, 1);
  f.num_experts = 4;
  f.top_k = experts_per_token;
  f.hidden_size = 8;
  f.neurons = 16;
  f.chunk_neurons = 16;
  f.capacity_experts = capacity;
  f.capacity_pages = capacity;
  f.worker = worker;
  return f;
}

std::unique_ptr<ExpertFlowPolicy> Make(const std::string& spec, const PolicyFacts& f) {
  return std::make_unique<ExpertFlowPolicy>(
      f, ResolvePolicySpec(spec)[0].params.As<ExpertFlowOptions>());
}

GateEvent Gate(int layer, const std::vector<int32_t>& ids, int k) {
  GateEvent g;
  g.layer = layer;
  g.top_k = k;
  g.n_tokens = static_cast<int64_t>(ids.size()) / k;
  g.num_experts = 4;
  g.ids = ids.data();
  return testing::Routed(g);
}

// One pass of one request over every layer, each routing `routed[layer]`.
void LearnPass(Policy& p, int64_t request, int32_t token,
               const std::vector<std::vector<int32_t>>& routed) {
  Decisions d;
  const int64_t one = 1;
  IterationBeginEvent it;
  it.n_requests = 1;
  it.requests = &request;
  it.token_counts = &one;
  it.tokens = &token;
  it.n_tokens = 1;
  p.OnIterationBegin(it, &d);
  for (int l = 0; l < static_cast<int>(routed.size()); ++l)
    p.OnGate(Gate(l, routed[static_cast<size_t>(l)],
                  static_cast<int>(routed[static_cast<size_t>(l)].size())),
             &d);
  p.OnIterationEnd(&d);
}

std::vector<std::pair<int, int32_t>> Prefetched(const Decisions& d) {
  std::vector<std::pair<int, int32_t>> out;
  for (const Prefetch& p : d.prefetch) out.push_back({p.expert.layer, p.expert.expert});
  return out;
}

TEST(ExpertFlowPolicy, FillsThePoolInLayerOrderAndMovesFinishedLayersSlots) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  auto p = Make("expertflow:predictor=frequency,topk=4", FourByFour(&worker, 4, 8));
  p->OnLearnBegin();
  Decisions d;
  const int32_t prompt = 7;
  p->OnRequestBegin({0, &prompt, 1}, &d);
  LearnPass(*p, 0, 7, {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}});
  p->OnLearnEnd();

  p->OnRequestBegin({1, &prompt, 1}, &d);
  const int64_t request = 1, one = 1;
  const int32_t token = 7;
  IterationBeginEvent it;
  it.n_requests = 1;
  it.requests = &request;
  it.token_counts = &one;
  it.tokens = &token;
  it.n_tokens = 1;
  p->OnIterationBegin(it, &d);
  worker.Poll(&d);  // The prediction's Apply step.
  EXPECT_EQ(Prefetched(d), (std::vector<std::pair<int, int32_t>>{
                               {0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}, {1, 1}, {1, 2}, {1, 3}}));
  for (size_t i = 1; i < d.prefetch.size(); ++i)  // Nearer layers are fetched first.
    EXPECT_LT(d.prefetch[i].priority, d.prefetch[i - 1].priority);
  d.Clear();
  std::vector<ExpertKey> order = {{0, 0}, {0, 1}, {0, 2}, {0, 3}};
  p->ComputeOrder(0, &order);
  const std::vector<int32_t> all = {0, 1, 2, 3};
  p->OnGate(Gate(0, all, 4), &d);
  EXPECT_TRUE(d.cancel.empty());
  for (int32_t x = 0; x < 3; ++x) p->OnExpertDone({0, x}, &d);
  EXPECT_TRUE(d.prefetch.empty());  // Layer 1 is still computing.
  p->OnExpertDone({0, 3}, &d);
  EXPECT_EQ(Prefetched(d), (std::vector<std::pair<int, int32_t>>{{2, 0}, {2, 1}, {2, 2}, {2, 3}}));
  // Layer 1's experts are now the victims of layer 3's prefetches.
  EXPECT_LT(p->EvictScore({0, 3}), p->EvictScore({2, 0}));
  EXPECT_LT(p->EvictScore({0, 3}), p->EvictScore({1, 0}));
}

TEST(ExpertFlowPolicy, CorrectionCancelsMisprefetchesAndOrdersVictims) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  auto p = Make("expertflow:predictor=frequency", FourByFour(&worker, 2, 6));
  p->OnLearnBegin();
  Decisions d;
  const int32_t prompt = 7;
  p->OnRequestBegin({0, &prompt, 1}, &d);
  // Every layer routes {0, 1}: the frequency predictor predicts them everywhere.
  LearnPass(*p, 0, 7, {{0, 1}, {0, 1}, {0, 1}, {0, 1}});
  p->OnLearnEnd();
  p->OnRequestBegin({1, &prompt, 1}, &d);
  const int64_t request = 1, one = 1;
  const int32_t token = 7;
  IterationBeginEvent it;
  it.n_requests = 1;
  it.requests = &request;
  it.token_counts = &one;
  it.tokens = &token;
  it.n_tokens = 1;
  p->OnIterationBegin(it, &d);
  worker.Poll(&d);
  EXPECT_EQ(d.prefetch.size(), 6u);  // Layers 1-3's predictions fill the pool of 6.
  d.Clear();
  // Layer 0 routes 1 and 2: 0 was mis-prefetched, 2 missed (the cache makes it demand).
  std::vector<ExpertKey> order = {{0, 1}, {0, 2}};
  p->ComputeOrder(0, &order);
  // Before the miss is inserted, the mis-prefetch is the first victim.
  const double misprefetched = p->EvictScore({0, 0});
  EXPECT_LT(misprefetched, p->EvictScore({3, 3}));  // Even below an idle expert.
  EXPECT_LT(misprefetched, p->EvictScore({1, 0}));
  const std::vector<int32_t> routed = {1, 2};
  p->OnGate(Gate(0, routed, 2), &d);
  ASSERT_EQ(d.cancel.size(), 1u);  // Its queued reads stop.
  EXPECT_EQ(d.cancel[0].layer, 0);
  EXPECT_EQ(d.cancel[0].expert, 0);
  d.Clear();
  p->OnTouch({0, 1}, true);
  p->OnTouch({0, 2}, true);
  p->OnExpertDone({0, 2}, &d);
  p->OnExpertDone({0, 1}, &d);
  // Computed experts next, least recently used first; planned ones last, farthest first.
  EXPECT_LT(misprefetched, p->EvictScore({0, 1}));
  EXPECT_LT(p->EvictScore({0, 1}), p->EvictScore({0, 2}));
  EXPECT_LT(p->EvictScore({0, 2}), p->EvictScore({3, 0}));
  EXPECT_LT(p->EvictScore({3, 0}), p->EvictScore({1, 0}));
  // The finished layer's slots go to layer 4's predictions.
  EXPECT_EQ(Prefetched(d), (std::vector<std::pair<int, int32_t>>{{3, 0}, {3, 1}}));
  p->OnIterationEnd(&d);
  // Between passes nothing is planned: recency alone.
  EXPECT_LT(p->EvictScore({0, 1}), p->EvictScore({0, 2}));
}

TEST(ExpertFlowPolicy, CancelOffKeepsMisprefetchesAsFirstVictimsOnly) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  auto p = Make("expertflow:predictor=frequency,cancel=0", FourByFour(&worker, 2, 6));
  p->OnLearnBegin();
  Decisions d;
  const int32_t prompt = 7;
  p->OnRequestBegin({0, &prompt, 1}, &d);
  LearnPass(*p, 0, 7, {{0, 1}, {0, 1}, {0, 1}, {0, 1}});
  p->OnLearnEnd();
  const int64_t request = 1, one = 1;
  IterationBeginEvent it;
  it.n_requests = 1;
  it.requests = &request;
  it.token_counts = &one;
  it.tokens = &prompt;
  it.n_tokens = 1;
  p->OnIterationBegin(it, &d);
  worker.Poll(&d);
  d.Clear();
  std::vector<ExpertKey> order = {{0, 1}, {0, 2}};
  p->ComputeOrder(0, &order);
  const std::vector<int32_t> routed = {1, 2};
  p->OnGate(Gate(0, routed, 2), &d);
  EXPECT_TRUE(d.cancel.empty());
  EXPECT_LT(p->EvictScore({0, 0}), p->EvictScore({2, 3}));
}

// ---------------------------------------------------------------------------------------
// The predictor.

// Random sequences over `vocab` ids whose tokens route, in every layer, to token % E
// (layers 0, 1) and to the previous token % E (layer 2): a rule of ids and of context.
std::vector<PathSequence> Planted(int n, int vocab, int experts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<PathSequence> out;
  for (int s = 0; s < n; ++s) {
    PathSequence q;
    for (int i = 0; i < 3; ++i) q.prompt.push_back(id(rng));
    q.tokens = q.prompt;
    for (int i = 0; i < 12; ++i) q.tokens.push_back(id(rng));
    for (size_t i = 0; i < q.tokens.size(); ++i) {
      RoutingPath p(3, experts);
      p.Set(0, q.tokens[i] % experts);
      p.Set(1, q.tokens[i] % experts);
      p.Set(2, i > 0 ? q.tokens[i - 1] % experts : 0);
      q.paths.push_back(p);
    }
    out.push_back(std::move(q));
  }
  return out;
}

// Share of (token, layer) whose top-1 prediction is the planted expert.
double Agreement(const RoutingPathPredictor& p, const std::vector<PathSequence>& data) {
  int64_t same = 0, total = 0;
  std::vector<float> logits(static_cast<size_t>(p.layers() * p.experts()));
  for (const PathSequence& q : data) {
    RequestContext ctx = p.Begin(q.prompt.data(), static_cast<int64_t>(q.prompt.size()));
    for (size_t i = 0; i < q.tokens.size(); ++i) {
      p.Step(&ctx, q.tokens[i], logits.data());
      const RoutingPath got = TopKPath(logits.data(), p.layers(), p.experts(), 1);
      for (int l = 0; l < p.layers(); ++l) {
        bool equal = true;
        for (int e = 0; e < p.experts(); ++e) equal &= got.Test(l, e) == q.paths[i].Test(l, e);
        same += equal;
        ++total;
      }
    }
  }
  return static_cast<double>(same) / static_cast<double>(total);
}

TEST(RoutingPathPredictor, LearnsAPlantedRuleOfTokensAndContext) {
  const int vocab = 40, experts = 8;
  const std::vector<PathSequence> train = Planted(200, vocab, experts, 1);
  const std::vector<PathSequence> test = Planted(40, vocab, experts, 2);
  RoutingPathPredictor p(vocab + 1, 16, 64, 3, experts, 7);
  const double before = Agreement(p, test);
  PathTraining t;
  t.epochs = 6;
  t.learning_rate = 1e-2;
  const double loss = p.Train(train, t);
  EXPECT_LT(loss, 0.05);
  EXPECT_LT(p.Loss(test), 0.05);
  EXPECT_GT(Agreement(p, test), 0.97);  // Top-1 of every layer is the planted expert.
  EXPECT_LT(before, 0.4);
}

TEST(RoutingPathPredictor, CannotLearnRoutingUnrelatedToTheTokens) {
  const int vocab = 40, experts = 8;
  std::vector<PathSequence> train = Planted(200, vocab, experts, 1);
  std::vector<PathSequence> test = Planted(40, vocab, experts, 2);
  std::mt19937_64 rng(5);
  for (auto* set : {&train, &test})
    for (PathSequence& q : *set)
      for (RoutingPath& path : q.paths) {
        path = RoutingPath(3, experts);
        for (int l = 0; l < 3; ++l) path.Set(l, static_cast<int>(rng() % experts));
      }
  RoutingPathPredictor p(vocab + 1, 16, 64, 3, experts, 7);
  PathTraining t;
  t.epochs = 6;
  t.learning_rate = 1e-2;
  p.Train(train, t);
  EXPECT_LT(Agreement(p, test), 0.25);  // Chance is 1/8.
}

TEST(RoutingPathPredictor, TrainingIsDeterministicGivenTheSeed) {
  const std::vector<PathSequence> train = Planted(30, 20, 4, 3);
  auto trained = [&](uint64_t seed) {
    RoutingPathPredictor p(21, 8, 16, 3, 4, 11);
    PathTraining t;
    t.epochs = 2;
    t.seed = seed;
    p.Train(train, t);
    StateWriter w;
    p.Save(w);
    return w.bytes();
  };
  EXPECT_EQ(trained(1), trained(1));
  EXPECT_NE(trained(1), trained(2));
}

TEST(RoutingPathPredictor, IncrementalStepsEqualOneBatch) {
  RoutingPathPredictor p(21, 8, 16, 3, 4, 11);
  const std::vector<int32_t> prompt = {3, 9}, tokens = {3, 9, 4, 25, 0};
  RequestContext ctx = p.Begin(prompt.data(), 2);
  std::vector<RequestContext> contexts;
  std::vector<float> stepwise;
  for (int32_t t : tokens) {
    contexts.push_back(ctx);
    std::vector<float> l(12);
    p.Step(&ctx, t, l.data());
    stepwise.insert(stepwise.end(), l.begin(), l.end());
  }
  std::vector<float> batch(stepwise.size());
  p.Predict(contexts, tokens, batch.data());
  EXPECT_EQ(batch, stepwise);
  EXPECT_EQ(ctx.prev1, 0);
  EXPECT_EQ(ctx.prev2, 25);
}

TEST(RoutingPathPredictor, TopKPathBreaksTiesByLowerIdAndThresholdPathCutsByProbability) {
  const float logits[] = {1, 3, 3, 0, /* layer 1 */ 5, 5, 5, 5};
  const RoutingPath p = TopKPath(logits, 2, 4, 2);
  EXPECT_TRUE(p.Test(0, 1) && p.Test(0, 2) && !p.Test(0, 0));
  EXPECT_TRUE(p.Test(1, 0) && p.Test(1, 1) && !p.Test(1, 2));
  EXPECT_EQ(p.Count(), 4);
  // σ(z) ≥ 0.5 is z ≥ 0; σ(z) ≥ 0.9 is z ≥ ln 9 ≈ 2.197.
  const float z[] = {-0.1f, 0.0f, 2.1f, 2.3f};
  const RoutingPath half = ThresholdPath(z, 1, 4, 0.5), sure = ThresholdPath(z, 1, 4, 0.9);
  EXPECT_FALSE(half.Test(0, 0));
  EXPECT_TRUE(half.Test(0, 1) && half.Test(0, 2) && half.Test(0, 3));
  EXPECT_EQ(sure.Count(), 1);
  EXPECT_TRUE(sure.Test(0, 3));
}

TEST(RoutingPathPredictor, RefusesCorruptState) {
  RoutingPathPredictor p(21, 8, 16, 3, 4, 11);
  StateWriter w;
  p.Save(w);
  std::string bytes = w.bytes();
  bytes.resize(bytes.size() - 3);
  StateReader r({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, "cut");
  RoutingPathPredictor q;
  EXPECT_THROW(q.Load(r), Error);
  EXPECT_TRUE(q.empty());  // Nothing half-loaded.
}

// ---------------------------------------------------------------------------------------

TEST(BatchLevelAccuracy, JaccardPrecisionRecallByHand) {
  auto path = [](std::initializer_list<int> experts) {
    RoutingPath p(1, 8);
    for (int e : experts) p.Set(0, e);
    return p;
  };
  // Step 0: requests 1 and 2; step 1: request 1.
  std::vector<PathSample> s = {
      {2, 0, path({0, 1}), path({0, 2})},
      {1, 0, path({3, 4}), path({3, 4})},
      {1, 1, path({5}), path({6})},
  };
  const BatchAccuracy one = BatchLevelAccuracy(s, 1);
  EXPECT_EQ(one.batches, 3);
  // Jaccard: 1/3, 1, 0.
  EXPECT_NEAR(one.jaccard[0], (1.0 / 3 + 1 + 0) / 3, 1e-12);
  EXPECT_NEAR(one.precision[0], (0.5 + 1 + 0) / 3, 1e-12);
  EXPECT_NEAR(one.exact[0], 1.0 / 3, 1e-12);
  const BatchAccuracy two = BatchLevelAccuracy(s, 2);
  EXPECT_EQ(two.batches, 2);
  // Step 0 ORed: predicted {0,1,3,4}, true {0,2,3,4}: 3 of 5. Step 1: 0.
  EXPECT_NEAR(two.jaccard[0], (3.0 / 5 + 0) / 2, 1e-12);
  EXPECT_NEAR(two.recall[0], (3.0 / 4 + 0) / 2, 1e-12);
  EXPECT_NEAR(two.mean_jaccard, two.jaccard[0], 1e-12);
  EXPECT_THROW(BatchLevelAccuracy(s, 0), Error);
}

// ---------------------------------------------------------------------------------------
// The policy learns from events and offers paths to token regrouping.

void LearnPlanted(Policy& p, const std::vector<PathSequence>& data) {
  p.OnLearnBegin();
  Decisions d;
  for (size_t r = 0; r < data.size(); ++r) {
    const PathSequence& q = data[r];
    const int64_t request = static_cast<int64_t>(r);
    p.OnRequestBegin({request, q.prompt.data(), static_cast<int64_t>(q.prompt.size())}, &d);
    for (size_t i = 0; i < q.tokens.size(); ++i) {
      std::vector<std::vector<int32_t>> routed;
      for (int l = 0; l < 3; ++l)
        for (int e = 0; e < 8; ++e)
          if (q.paths[i].Test(l, e)) routed.push_back({e});
      LearnPass(p, request, q.tokens[i], routed);
    }
    p.OnRequestEnd({request}, &d);
  }
  p.OnLearnEnd();
}

PolicyFacts ThreeByEight(PolicyWorker* worker) {
  PolicyFacts f = FourByFour(worker, 1, 6);
  f.num_layers = 3;
  f.moe_layer.assign(3, 1);
  f.num_experts = 8;
  return f;
}

// One served pass of `request` over tokens [from, to) of `q`, each layer's gate routing the
// tokens' planted experts, every routed expert then computed.
void ServePass(ExpertFlowPolicy& p, PolicyWorker& worker, int64_t request, const PathSequence& q,
               size_t from, size_t to) {
  Decisions d;
  const int64_t count = static_cast<int64_t>(to - from);
  IterationBeginEvent it;
  it.n_requests = 1;
  it.requests = &request;
  it.token_counts = &count;
  it.tokens = q.tokens.data() + from;
  it.n_tokens = count;
  p.OnIterationBegin(it, &d);
  worker.Poll(&d);
  for (int l = 0; l < q.paths[from].layers(); ++l) {
    std::vector<int32_t> ids;
    for (size_t t = from; t < to; ++t)
      for (int e = 0; e < q.paths[t].experts(); ++e)
        if (q.paths[t].Test(l, e)) ids.push_back(e);
    std::vector<ExpertKey> order;
    for (int32_t e : std::set<int32_t>(ids.begin(), ids.end())) order.push_back({l, e});
    p.ComputeOrder(l, &order);
    p.OnGate(Gate(l, ids, 1), &d);
    for (const ExpertKey& k : order) p.OnExpertDone({k.layer, k.expert}, &d);
  }
  p.OnIterationEnd(&d);
}

TEST(ExpertFlowPolicy, PredictsThePassPathOfARegroupingCandidate) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  const PolicyFacts f = ThreeByEight(&worker);
  const std::string spec = "expertflow:dim=16,hidden=64,epochs=6,lr=0.01";
  auto p = Make(spec, f);
  const int32_t tokens[] = {11, 5};
  EXPECT_EQ(p->PredictPassPath({3, tokens, 2}).Count(), 0);  // Nothing learned yet.
  LearnPlanted(*p, Planted(200, 40, 8, 1));
  ASSERT_FALSE(p->predictor().empty());

  // Request 3 has run its prefill (the prompt 1, 2, 9).
  PathSequence q = Planted(1, 40, 8, 4)[0];
  q.prompt = {1, 2, 9};
  q.tokens = q.prompt;
  q.paths.resize(3);
  Decisions d;
  p->OnRequestBegin({3, q.prompt.data(), 3}, &d);
  ServePass(*p, worker, 3, q, 0, 3);
  // Candidate 11, 5: layers 0-1 route by the token, layer 2 by the previous one (9, 11).
  const RoutingPath path = p->PredictPassPath({3, tokens, 2});
  EXPECT_EQ(path.layers(), 3);
  EXPECT_EQ(path.experts(), 8);
  for (int l = 0; l < 2; ++l) {
    EXPECT_TRUE(path.Test(l, 11 % 8)) << l;
    EXPECT_TRUE(path.Test(l, 5)) << l;
    EXPECT_EQ(path.CountLayer(l), 2) << l;
  }
  EXPECT_TRUE(path.Test(2, 9 % 8));
  EXPECT_TRUE(path.Test(2, 11 % 8));
  EXPECT_EQ(path.CountLayer(2), 2);
  // The history has not moved: one token 5 is still predicted after 9.
  const RoutingPath one = p->PredictPassPath({3, tokens + 1, 1});
  EXPECT_EQ(one.Count(), 3);
  EXPECT_TRUE(one.Test(0, 5));
  EXPECT_TRUE(one.Test(2, 9 % 8));
  EXPECT_EQ(p->PredictPassPath({3, tokens, 0}).Count(), 0);

  // What was learned survives a save and load into a fresh policy.
  const std::string saved = EncodePolicyState(*p, f);
  auto fresh = Make(spec, f);
  DecodePolicyState(*fresh, f, {reinterpret_cast<const std::byte*>(saved.data()), saved.size()},
                    "saved");
  fresh->OnRequestBegin({3, q.prompt.data(), 3}, &d);
  ServePass(*fresh, worker, 3, q, 0, 3);
  EXPECT_EQ(fresh->PredictPassPath({3, tokens, 2}), path);
  const std::string cut = saved.substr(0, saved.size() / 2);
  auto other = Make(spec, f);
  EXPECT_THROW(DecodePolicyState(
                   *other, f, {reinterpret_cast<const std::byte*>(cut.data()), cut.size()}, "cut"),
               Error);
}

TEST(ExpertFlowPolicy, HugeOrNegativeTokenIdsShareARowInsteadOfSizingTheTable) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  const PolicyFacts f = ThreeByEight(&worker);
  auto p = Make("expertflow:dim=4,hidden=8,epochs=1", f);
  std::vector<PathSequence> data = Planted(3, 40, 8, 1);
  data[0].tokens[4] = 2147483647;  // INT32_MAX: max_id + 2 would overflow.
  data[1].tokens[5] = -7;
  LearnPlanted(*p, data);
  ASSERT_FALSE(p->predictor().empty());
  EXPECT_EQ(p->predictor().vocab(), (1 << 18) + 2);
  Decisions d;
  const int32_t odd[] = {2147483647, -1, 5};
  p->OnRequestBegin({9, odd, 3}, &d);
  EXPECT_EQ(p->PredictPassPath({9, odd, 3}).layers(), 3);  // Predicts, no crash.
}

// The scheduler offers four new requests split [0, 0, 1, 1]; their first tokens route
// (planted rule) to experts 0, 1, 0, 1 in layers 0-1, and in layer 2, which routes by the
// previous token, to expert 0 (no token before them has run). The split activates 2 + 2 + 1
// experts per pass (10 over the two passes); clustering the predicted paths pairs the
// requests of equal routing: 1 expert per layer and pass (6), as the paper's Fig. 4.
TEST(ExpertFlowPolicy, RegroupsRequestsByPredictedPaths) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  const PolicyFacts f = ThreeByEight(&worker);
  auto p = Make("expertflow:dim=16,hidden=64,epochs=6,lr=0.01", f);
  const int32_t prompts[4] = {16, 17, 24, 25};
  const int32_t next[4] = {0, 1, 8, 9};
  std::vector<PassCandidate> candidates;
  for (int i = 0; i < 4; ++i) candidates.push_back({i + 1, &next[i], 1});
  std::vector<int> group = {0, 0, 1, 1};
  EXPECT_FALSE(p->RegroupPasses(candidates, 2, &group));  // Nothing learned: no opinion.

  LearnPlanted(*p, Planted(200, 40, 8, 1));
  Decisions d;
  for (int i = 0; i < 4; ++i) p->OnRequestBegin({i + 1, &prompts[i], 1}, &d);
  for (int i = 0; i < 4; ++i) {
    const RoutingPath path = p->PredictPassPath(candidates[static_cast<size_t>(i)]);
    for (int l = 0; l < 2; ++l) EXPECT_TRUE(path.Test(l, next[i] % 8)) << i << " " << l;
    EXPECT_TRUE(path.Test(2, 0)) << i;
    EXPECT_EQ(path.Count(), 3) << i;
  }
  ASSERT_TRUE(p->RegroupPasses(candidates, 2, &group));
  EXPECT_EQ(group[0], group[2]);
  EXPECT_EQ(group[1], group[3]);
  EXPECT_NE(group[0], group[1]);
  nlohmann::json report;
  p->ReportJson(&report);
  const auto& r = report["expertflow"]["regrouping"];
  EXPECT_EQ(r["units"], 1);
  EXPECT_EQ(r["changed"], 1);
  EXPECT_EQ(r["predicted_activated_before"], 10);
  EXPECT_EQ(r["predicted_activated_after"], 6);

  // Requests already grouped by routing stay as they are (the safeguard); regroup=0 declines.
  group = {0, 1, 0, 1};
  ASSERT_TRUE(p->RegroupPasses(candidates, 2, &group));
  EXPECT_EQ(group, (std::vector<int>{0, 1, 0, 1}));
  auto off = Make("expertflow:dim=16,hidden=64,epochs=6,lr=0.01,regroup=0", f);
  LearnPlanted(*off, Planted(200, 40, 8, 1));
  EXPECT_FALSE(off->RegroupPasses(candidates, 2, &group));
}

TEST(ExpertFlowPolicy, ReportsBatchLevelAccuracyAgainstBaselines) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  const PolicyFacts f = ThreeByEight(&worker);
  auto p = Make("expertflow:dim=16,hidden=64,epochs=6,lr=0.01", f);
  LearnPlanted(*p, Planted(200, 40, 8, 1));
  // Two held-out requests: a prefill pass of the 3 prompt tokens, then 12 decode passes.
  Decisions d;
  int64_t request = 100;
  for (const PathSequence& q : Planted(2, 40, 8, 9)) {
    p->OnRequestBegin({request, q.prompt.data(), 3}, &d);
    ServePass(*p, worker, request, q, 0, 3);
    for (size_t i = 3; i < q.tokens.size(); ++i) ServePass(*p, worker, request, q, i, i + 1);
    p->OnRequestEnd({request++}, &d);
  }
  ASSERT_EQ(p->scored().size(), 24u);
  nlohmann::json report;
  p->ReportJson(&report);
  const nlohmann::json& r = report["expertflow"];
  EXPECT_EQ(r["scored_decode_tokens"], 24);
  EXPECT_EQ(r["accuracy"][0]["batch"], 1);
  EXPECT_EQ(r["accuracy"][0]["batches"], 24);
  EXPECT_EQ(r["accuracy"][1]["batch"], 8);
  EXPECT_EQ(r["accuracy"][1]["batches"], 12);  // Two requests per decode step.
  EXPECT_GT(r["accuracy"][0]["jaccard"].get<double>(), 0.9);
  EXPECT_LT(r["accuracy_most_frequent"][0]["jaccard"].get<double>(), 0.5);
}

// ---------------------------------------------------------------------------------------
// A trained predictor on the engine: the generic conformance tests run `expertflow`
// untrained (no learning there), so the learned path is held to the same promises here.

TEST(ExpertFlowPolicy, TrainedPredictorIsLosslessAndTheSimulatorGivesTheEnginesCounts) {
  auto model = LoadModel(moex::testing::ChunkedTinyModelPath(Arch::kOlmoe));
  moex::testing::TempDir dir;
  const std::string trace_path = dir / "learn.trace";
  moex::testing::RecordLearningTrace(*model, trace_path);
  const std::string spec = "expertflow:dim=8,hidden=16,epochs=2";
  // Learns from the trace, then serves: the CLI's --learn-from.
  const tiers::PolicyMaker learned = [&](const PolicyFacts& f) -> std::unique_ptr<Policy> {
    std::unique_ptr<Policy> p = MakePolicy(spec, f);
    trace::LearnFromTraces(*p, f, {trace_path});
    return p;
  };
  ResidentMoeExecutor resident(*model);
  const std::vector<int32_t> prompt = {3, 141, 59, 26, 53, 58, 97, 93, 23, 84};
  const std::vector<float> want = moex::testing::PrefillLogits(*model, resident, prompt);
  for (const char* budget : {"25%", "50%"}) {
    SCOPED_TRACE(budget);
    OffloadOptions o;
    o.store_path = dir / "experts.moex";
    o.host_budget = budget;
    o.policy.spec = spec;
    o.policy.make = learned;
    o.policy.worker = PolicyWorker::Mode::kSync;
    o.chunk_neurons = moex::testing::kChunkNeurons;
    o.progress = false;
    for (auto mode : {PolicyWorker::Mode::kSync, PolicyWorker::Mode::kAsync}) {
      OffloadOptions oo = o;
      oo.policy.worker = mode;
      OffloadMoeExecutor offload(*model, oo);
      EXPECT_EQ(moex::testing::PrefillLogits(*model, offload, prompt), want);
      EXPECT_EQ(moex::testing::GreedyTokens(*model, offload),
                moex::testing::GreedyTokens(*model, resident));
    }
    // Replaying the learning trace through the trained policy: engine == simulator.
    OffloadMoeExecutor offload(*model, o);
    Transformer t(*model, offload);
    Generator g(t);
    GenerationRequest a, b;
    a.prompt = {5, 9, 200, 31, 7, 64, 12, 90};
    a.max_tokens = 12;
    b.prompt = {77, 3, 41};
    b.max_tokens = 9;
    g.Generate({a, b});
    g.Generate({b});
    const tiers::OffloadMetrics engine = offload.Metrics();
    EXPECT_GT(engine.total.counters.prefetch_issued, 0);  // The predictor planned.
    trace::TraceReader reader(trace_path);
    sim::ReplayOptions so;
    so.policy.spec = spec;
    so.policy.make = learned;
    so.budget = budget;
    so.chunk_neurons = moex::testing::kChunkNeurons;
    so.policy.worker = PolicyWorker::Mode::kSync;
    so.hardware.name = "test";
    so.hardware.compute_gb_per_s = 10;
    so.hardware.compute_tflops = 1;
    so.hardware.link_gb_per_s = 1;
    const sim::ReplayResult r = sim::Replay(reader, so);
    EXPECT_EQ(r.total.hits, engine.total.counters.hits);
    EXPECT_EQ(r.total.misses, engine.total.counters.misses);
    EXPECT_EQ(r.total.prefetch_issued, engine.total.counters.prefetch_issued);
    EXPECT_EQ(r.total.prefetch_used, engine.total.counters.prefetch_used);
    EXPECT_EQ(r.total.prefetch_cancelled, engine.total.counters.prefetch_cancelled);
    EXPECT_EQ(r.total.evictions, engine.total.counters.evictions);
  }
}

}  // namespace
}  // namespace moex::policy

// ProMoE (docs/policies/promoe.md): the learned predictor's training, the stride target,
// early preemption per layer or globally, the token-based baseline, per-layer caches, the
// predictor's state. The platform's generic tests cover lossless and simulator == engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "policy/policy.h"
#include "policy/policy_state.h"
#include "policy/policy_worker.h"
#include "policy/promoe/promoe_predictor.h"
#include "policy/registry.h"
#include "support/policy_events.h"
#include "tiers/cache_plan.h"

namespace moex::policy {
namespace {

// A planted rule: the routed top-k of x is the top-k of R·x for a fixed R.
struct PlantedData {
  std::vector<float> x;
  std::vector<int32_t> ids;
};
PlantedData Planted(int64_t n, int d, int e, int k, uint64_t seed, bool shuffle_labels) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> r(static_cast<size_t>(e * d));
  std::mt19937_64 rule(99);  // The same rule for every data set.
  for (float& v : r) v = std::normal_distribution<float>(0, 1)(rule);
  PlantedData p;
  p.x.resize(static_cast<size_t>(n * d));
  for (float& v : p.x) v = normal(rng);
  std::vector<float> s(static_cast<size_t>(e));
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < e; ++j) {
      s[static_cast<size_t>(j)] = 0;
      for (int c = 0; c < d; ++c)
        s[static_cast<size_t>(j)] +=
            r[static_cast<size_t>(j * d + c)] * p.x[static_cast<size_t>(i * d + c)];
    }
    for (int32_t id : TopKIndices(s.data(), e, k)) p.ids.push_back(id);
  }
  if (shuffle_labels) {  // Routing unrelated to the input.
    std::vector<int64_t> rows(static_cast<size_t>(n));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    std::vector<int32_t> shuffled;
    for (int64_t row : rows)
      shuffled.insert(shuffled.end(), p.ids.begin() + row * k, p.ids.begin() + (row + 1) * k);
    p.ids = shuffled;
  }
  return p;
}

TEST(PromoePredictor, TopKIndicesOrdersByScoreThenIndex) {
  const float s[] = {0.5f, 2.0f, 0.5f, 1.0f};
  EXPECT_EQ(TopKIndices(s, 4, 3), (std::vector<int32_t>{1, 3, 0}));
  EXPECT_EQ(TopKIndices(s, 4, 9).size(), 4u);
}

TEST(PromoePredictor, LearnsAPlantedRuleAndNotShuffledRouting) {
  const int d = 16, e = 8, k = 2;
  MlpTraining t;
  t.epochs = 30;
  t.learning_rate = 3e-3;
  const PlantedData train = Planted(3000, d, e, k, 1, false);
  const PlantedData test = Planted(500, d, e, k, 2, false);
  ExpertPredictorMlp mlp(d, 64, e, 7);
  mlp.Train(train.x.data(), train.ids.data(), 3000, k, t);
  EXPECT_GT(mlp.Evaluate(test.x.data(), test.ids.data(), 500, k).accuracy, 0.9);

  const PlantedData noise = Planted(3000, d, e, k, 3, true);
  ExpertPredictorMlp blind(d, 64, e, 7);
  blind.Train(noise.x.data(), noise.ids.data(), 3000, k, t);
  // Chance is k/e = 0.25 of the routed set found in a random top-k.
  const double acc = blind.Evaluate(test.x.data(), test.ids.data(), 500, k).accuracy;
  EXPECT_LT(acc, 0.4);
  EXPECT_GT(acc, 0.1);
}

TEST(PromoePredictor, TrainingIsDeterministicAndStateRoundTrips) {
  const PlantedData data = Planted(400, 8, 6, 2, 5, false);
  MlpTraining t;
  t.epochs = 3;
  auto train = [&] {
    ExpertPredictorMlp mlp(8, 16, 6, 11);
    mlp.Train(data.x.data(), data.ids.data(), 400, 2, t);
    StateWriter w;
    mlp.Save(w);
    return w.bytes();
  };
  const std::string a = train();
  EXPECT_EQ(a, train());
  ExpertPredictorMlp loaded;
  StateReader r(std::as_bytes(std::span(a.data(), a.size())), "test");
  loaded.Load(r);
  EXPECT_EQ(loaded.parameters(), 8 * 16 + 16 + 16 * 6 + 6);
  StateWriter again;
  loaded.Save(again);
  EXPECT_EQ(again.bytes(), a);
  // A truncated or inconsistent state is an error, not a crash.
  StateReader cut(std::as_bytes(std::span(a.data(), a.size() / 2)), "cut");
  ExpertPredictorMlp broken;
  EXPECT_THROW(broken.Load(cut), Error);
  EXPECT_THROW(ExpertPredictorMlp(0, 4, 6, 1), Error);
  std::vector<int32_t> bad_ids(2, 9);  // Expert 9 of 6.
  ExpertPredictorMlp mlp(8, 16, 6, 11);
  EXPECT_THROW(mlp.Train(data.x.data(), bad_ids.data(), 1, 2, t), Error);
}

// ---------------------------------------------------------------------------------------
// The policy on a 4-layer model with 6 experts, top-2, d = 8.

PolicyFacts Facts(PolicyWorker* worker) {
  const ModelConfig c = testing::SmallPolicyConfig(4);
  tiers::CacheGeometry g{c.num_layers, c.num_experts, c.moe_intermediate_size, 16, 64, 8};
  PolicyFacts f = tiers::MakePolicyFacts(c, g, 64, nullptr, 0);
  f.worker = worker;
  return f;
}

IterationBeginEvent Begin(const std::vector<int32_t>& tokens) {
  IterationBeginEvent b;
  b.n_tokens = static_cast<int64_t>(tokens.size());
  b.tokens = tokens.data();
  return b;
}

// Learning passes where layer l+2 routes to {2·sign(h0) + …}: a rule of layer l's input.
// One token per pass; layer 0's input decides layers 2's experts, layer 1's decides 3's.
void LearnRule(Policy& p, int passes) {
  std::mt19937 rng(4);
  std::normal_distribution<float> n(0, 1);
  p.OnLearnBegin();
  Decisions d;
  const std::vector<int32_t> token{7};
  for (int i = 0; i < passes; ++i) {
    p.OnIterationBegin(Begin(token), &d);
    std::vector<std::vector<float>> h(4, std::vector<float>(8));
    for (auto& v : h)
      for (float& x : v) x = n(rng);
    for (int l = 0; l < 4; ++l) {
      std::vector<int32_t> ids{0, 1};
      if (l >= 2) {
        const std::vector<float>& src = h[static_cast<size_t>(l - 2)];
        ids = src[0] > 0 ? std::vector<int32_t>{4, 5} : std::vector<int32_t>{2, 3};
      }
      p.OnGate(testing::TopTwoGate(l, ids, &h[static_cast<size_t>(l)]), &d);
    }
    p.OnIterationEnd(&d);
  }
  p.OnLearnEnd();
}

TEST(PromoePolicy, StrideTargetIsTwoLayersAheadAndEarlyPreemptionClearsThatLayer) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  auto p = MakePolicy("promoe:epochs=40,lr=0.01,layer_cache=0", Facts(&worker));
  LearnRule(*p, 400);
  nlohmann::json r;
  p->ReportJson(&r);
  EXPECT_EQ(r["promoe"]["trained_layers"], 2);  // Layers 2 and 3 (sources 0 and 1).
  EXPECT_GT(r["promoe"]["mean_eval_accuracy"].get<double>(), 0.9);

  Decisions d;
  const std::vector<int32_t> token{7};
  p->OnIterationBegin(Begin(token), &d);
  std::vector<float> plus(8, 0.0f), minus(8, 0.0f);
  plus[0] = 2.0f;
  minus[0] = -2.0f;
  d.Clear();
  const std::vector<int32_t> routed0{0, 1};
  p->OnGate(testing::TopTwoGate(0, routed0, &plus), &d);  // Predicts layer 2 from layer 0's input.
  worker.Poll(&d);
  ASSERT_EQ(d.prefetch.size(), 2u);
  std::vector<int32_t> got{d.prefetch[0].expert.expert, d.prefetch[1].expert.expert};
  std::sort(got.begin(), got.end());
  EXPECT_EQ(d.prefetch[0].expert.layer, 2);
  EXPECT_EQ(got, (std::vector<int32_t>{4, 5}));
  EXPECT_GT(d.prefetch[0].priority, d.prefetch[1].priority);  // One FIFO of tasks.
  d.Clear();
  p->OnGate(testing::TopTwoGate(1, routed0, &minus), &d);  // Predicts layer 3: {2, 3}.
  worker.Poll(&d);
  ASSERT_EQ(d.prefetch.size(), 2u);
  EXPECT_EQ(d.prefetch[0].expert.layer, 3);
  d.Clear();
  // Layer 2 routes to 4 and 0: its leftover speculative 5 is dropped, layer 3's stay.
  const std::vector<int32_t> routed2{4, 0};
  p->OnGate(testing::TopTwoGate(2, routed2, &plus), &d);
  EXPECT_EQ(d.cancel, (std::vector<ExpertKey>{{2, 5}}));
}

TEST(PromoePolicy, GlobalPreemptionClearsEveryLayersSpeculation) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  auto p = MakePolicy("promoe:predictor=token,preempt=all,layer_cache=0", Facts(&worker));
  // Token 7 went to {4, 5} at every layer in the learning trace.
  p->OnLearnBegin();
  Decisions d;
  const std::vector<int32_t> token{7};
  p->OnIterationBegin(Begin(token), &d);
  for (int l = 0; l < 4; ++l) p->OnGate(testing::TopTwoGate(l, {4, 5}, nullptr), &d);
  p->OnIterationEnd(&d);
  p->OnLearnEnd();
  d.Clear();
  // Token-based prediction is iteration-wise: every layer before the pass.
  p->OnIterationBegin(Begin(token), &d);
  ASSERT_EQ(d.prefetch.size(), 8u);
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{0, 4}));
  EXPECT_EQ(d.prefetch[7].expert, (ExpertKey{3, 5}));
  d.Clear();
  // Layer 0 routes {4, 1}: 0:5 and every later layer's predictions are dropped.
  p->OnGate(testing::TopTwoGate(0, {4, 1}, nullptr), &d);
  std::vector<ExpertKey> cancelled = d.cancel;
  std::sort(cancelled.begin(), cancelled.end());
  EXPECT_EQ(cancelled,
            (std::vector<ExpertKey>{{0, 5}, {1, 4}, {1, 5}, {2, 4}, {2, 5}, {3, 4}, {3, 5}}));
}

TEST(PromoePolicy, PerLayerCachesSplitTheBudgetEqually) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  PolicyFacts f = Facts(&worker);
  auto p = MakePolicy("promoe:predictor=token", f);
  Decisions d;
  p->OnIterationBegin(Begin({1}), &d);
  // 8 pages over 4 MoE layers: 2 pages each.
  EXPECT_EQ(d.layer_budgets, (std::vector<int64_t>{2 * 64, 2 * 64, 2 * 64, 2 * 64}));
  d.Clear();
  p->OnIterationBegin(Begin({1}), &d);
  EXPECT_TRUE(d.layer_budgets.empty());  // Once.
}

TEST(PromoePolicy, StateCarriesThePredictorAndRefusesAnotherModel) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  const PolicyFacts f = Facts(&worker);
  auto p = MakePolicy("promoe:epochs=2", f);
  LearnRule(*p, 50);
  const std::string state = EncodePolicyState(*p, f);
  auto q = MakePolicy("promoe:epochs=2", f);
  DecodePolicyState(*q, f, std::as_bytes(std::span(state.data(), state.size())), "state");
  EXPECT_EQ(EncodePolicyState(*q, f), state);
  nlohmann::json r;
  q->ReportJson(&r);
  EXPECT_EQ(r["promoe"]["trained_layers"], 2);

  PolicyFacts other = f;
  other.num_experts = 8;
  auto wrong = MakePolicy("promoe:epochs=2", other);
  EXPECT_THROW(
      DecodePolicyState(*wrong, other, std::as_bytes(std::span(state.data(), state.size())), "s"),
      Error);
}

TEST(PromoePolicy, BadSpecsAreClearErrors) {
  PolicyWorker worker(PolicyWorker::Mode::kSync);
  EXPECT_THROW(MakePolicy("promoe:predictor=oracle", Facts(&worker)), Error);
  EXPECT_THROW(MakePolicy("promoe:distance=0", Facts(&worker)), Error);
  EXPECT_THROW(MakePolicy("promoe:preempt=some", Facts(&worker)), Error);
}

}  // namespace
}  // namespace moex::policy

#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "policy/composed_policy.h"
#include "policy/policy.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"
#include "support/policy_events.h"
#include "support/random_weight_source.h"
#include "tiers/cache_plan.h"
#include "tiers/offload_controller.h"
#include "tiers/offload_metrics.h"

namespace moex::policy {
namespace {

// Facts for testing::SmallPolicyConfig(3) with room for 4 whole experts; router weights from
// `weights` if given.
PolicyFacts Facts(const WeightSource* weights = nullptr, uint64_t seed = 0) {
  static PolicyWorker worker(PolicyWorker::Mode::kSync);
  const ModelConfig c = testing::SmallPolicyConfig(3);
  tiers::CacheGeometry g{c.num_layers, c.num_experts, c.moe_intermediate_size, 16, 64, 4};
  PolicyFacts f = tiers::MakePolicyFacts(c, g, 64, weights, seed);
  f.worker = &worker;
  return f;
}

TEST(PolicyTest, NamesAreValidated) {
  const PolicyFacts f = Facts();
  EXPECT_THROW(MakePolicy("belady", f), Error);    // Needs the future.
  EXPECT_THROW(MakePolicy("nextgate", f), Error);  // Needs router weights.
  EXPECT_THROW(MakePolicy("nosuch", f), Error);
  EXPECT_EQ(MakePolicy("lfu", f)->name(), "lfu");
  EXPECT_EQ(MakePolicy("ondemand", f)->name(), "lru");
}

TEST(PolicyTest, LruScoresByLastUse) {
  auto p = MakePolicy("lru", Facts());
  Decisions d;
  std::vector<int32_t> a{0, 1}, b{2, 0};
  p->OnGate(testing::TopTwoGate(0, a), &d);
  p->OnGate(testing::TopTwoGate(0, b), &d);
  EXPECT_LT(p->EvictScore({0, 1}), p->EvictScore({0, 2}));
  EXPECT_LT(p->EvictScore({0, 5}), p->EvictScore({0, 1}));  // Never used: first to go.
  EXPECT_TRUE(d.prefetch.empty());
}

TEST(PolicyTest, LfuScoresByCountThenRecency) {
  auto p = MakePolicy("lfu", Facts());
  Decisions d;
  std::vector<int32_t> a{0, 1}, b{0, 2}, c{3, 1};
  p->OnGate(testing::TopTwoGate(0, a), &d);
  p->OnGate(testing::TopTwoGate(0, b), &d);
  p->OnGate(testing::TopTwoGate(0, c), &d);
  EXPECT_GT(p->EvictScore({0, 0}), p->EvictScore({0, 3}));  // 2 uses > 1 use.
  EXPECT_GT(p->EvictScore({0, 1}), p->EvictScore({0, 0}));  // Same count, more recent.
  EXPECT_LT(p->EvictScore({0, 2}), p->EvictScore({0, 3}));
}

TEST(PolicyTest, RandomIsReproducibleFromTheSeed) {
  auto a = MakePolicy("random", Facts(nullptr, 42));
  auto b = MakePolicy("random", Facts(nullptr, 42));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a->EvictScore({0, i % 6}), b->EvictScore({0, i % 6}));
}

TEST(PolicyTest, NextGatePredictsWithTheNextRouterAndCancelsMisses) {
  const ModelConfig c = testing::SmallPolicyConfig(3);
  RandomWeightSource src(c, DType::kF32, 3);
  auto p = MakePolicy("nextgate", Facts(&src));
  std::vector<float> h(8);
  for (int j = 0; j < 8; ++j) h[static_cast<size_t>(j)] = 0.1f * (j + 1);
  // Expected: top-2 of layer 1's router applied to h.
  const TensorView* w = src.Find(RouterTensorName(c.arch, 1));
  std::vector<std::pair<float, int>> s;
  for (int e = 0; e < 6; ++e) {
    float acc = 0;
    for (int j = 0; j < 8; ++j) {
      float v;
      std::memcpy(&v, w->data + 4 * (e * 8 + j), 4);
      acc += v * h[static_cast<size_t>(j)];
    }
    s.push_back({-acc, e});
  }
  std::sort(s.begin(), s.end());
  Decisions d;
  std::vector<int32_t> ids{0, 1};
  p->OnGate(testing::TopTwoGate(0, ids, &h), &d);
  ASSERT_EQ(d.prefetch.size(), 2u);
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{1, s[0].second}));
  EXPECT_EQ(d.prefetch[1].expert, (ExpertKey{1, s[1].second}));
  EXPECT_GT(d.prefetch[0].priority, d.prefetch[1].priority);
  d.Clear();
  // Layer 1 routes to the first prediction only: the second is cancelled.
  std::vector<int32_t> real{s[0].second, s[5].second};
  p->OnGate(testing::TopTwoGate(1, real, &h), &d);
  ASSERT_EQ(d.cancel.size(), 1u);
  EXPECT_EQ(d.cancel[0], (ExpertKey{1, s[1].second}));
}

// A prefetcher whose predictions come from a worker job (as ProMoE's and MoE-Infinity's):
// at its first gate it asks, off the event, for expert 0:5.
class WorkerPrefetcher : public Policy {
 public:
  explicit WorkerPrefetcher(const PolicyFacts& f) : facts_(f) {}
  std::string name() const override { return "worker-prefetcher"; }
  void OnGate(const GateEvent&, Decisions*) override {
    if (submitted_) return;
    submitted_ = true;
    facts_.worker->Submit(
        ExpertKey{0, 5}, [](const ExpertKey& k) { return k; },
        [](const ExpertKey& k, Decisions* d) {
          d->prefetch.push_back({k, Tier::kHost, 0, {}});
        });
  }

 private:
  PolicyFacts facts_;
  bool submitted_ = false;
};

// A prefetch asked for by a worker job is a use for the evictor, like one asked for inside
// the event: LRU keeps the just-prefetched 0:5 and evicts the older 0:0 and 0:1.
TEST(PolicyTest, WorkerPrefetchesTouchTheEvictor) {
  const ModelConfig c = testing::SmallPolicyConfig(3);
  const tiers::CacheGeometry g{c.num_layers, c.num_experts, c.moe_intermediate_size, 16, 64, 3};
  auto worker = std::make_unique<PolicyWorker>(PolicyWorker::Mode::kSync);
  // A job before the controller exists (as --learn-from's) is not the run's policy time.
  worker->Submit(
      0, [](const int& x) { return x; }, [](const int&, Decisions*) {});
  PolicyFacts f = tiers::MakePolicyFacts(c, g, 64, nullptr, 0);
  f.worker = worker.get();
  std::vector<ComposedPolicy::Part> parts;
  parts.push_back({"worker-prefetcher", std::make_unique<WorkerPrefetcher>(f)});
  parts.push_back({"lru", MakePolicy("lru", f)});
  tiers::OffloadController controller(g, std::make_unique<ComposedPolicy>(std::move(parts)),
                                      std::move(worker), f.moe_layer);
  std::vector<tiers::CacheCommand> cmds;
  IterationBeginEvent begin;
  controller.IterationBegin(begin, &cmds);
  const std::vector<int32_t> first{0, 1};
  controller.Gate(testing::TopTwoGate(0, first), &cmds);
  ASSERT_TRUE(controller.cache().Present({0, 5}));
  controller.ExpertDone({0, 0}, &cmds);
  controller.ExpertDone({0, 1}, &cmds);
  controller.IterationEnd(&cmds);
  controller.IterationBegin(begin, &cmds);
  const std::vector<int32_t> second{2, 3};
  controller.Gate(testing::TopTwoGate(0, second), &cmds);
  EXPECT_TRUE(controller.cache().Present({0, 5}));
  EXPECT_FALSE(controller.cache().Present({0, 0}));
  EXPECT_FALSE(controller.cache().Present({0, 1}));
  const tiers::PolicyTiming t = controller.Timing();
  EXPECT_EQ(t.worker_jobs, 1);  // The prefetcher's job only.
  EXPECT_TRUE(t.jobs_inline);   // Its time is inside hook_us: counted once per pass.
  EXPECT_DOUBLE_EQ(tiers::PolicyTimingJson(t)["cpu_us_per_pass"].get<double>(),
                   t.hook_us / static_cast<double>(t.passes));
}

// Expert parallelism: a stack that holds only some experts (OffloadController::set_owner)
// ignores its policy's prefetch of another rank's expert: no page, no read, counted.
TEST(PolicyTest, APrefetchOfAnotherRanksExpertTakesNoPageAndReadsNothing) {
  const ModelConfig c = testing::SmallPolicyConfig(3);
  const tiers::CacheGeometry g{c.num_layers, c.num_experts, c.moe_intermediate_size, 16, 64, 3};
  auto worker = std::make_unique<PolicyWorker>(PolicyWorker::Mode::kSync);
  PolicyFacts f = tiers::MakePolicyFacts(c, g, 64, nullptr, 0);
  f.worker = worker.get();
  std::vector<ComposedPolicy::Part> parts;
  parts.push_back({"worker-prefetcher", std::make_unique<WorkerPrefetcher>(f)});
  parts.push_back({"lru", MakePolicy("lru", f)});
  tiers::OffloadController controller(g, std::make_unique<ComposedPolicy>(std::move(parts)),
                                      std::move(worker), f.moe_layer);
  controller.set_owner([](const ExpertKey& k) { return k.expert != 5; });
  std::vector<tiers::CacheCommand> cmds;
  controller.IterationBegin(IterationBeginEvent{}, &cmds);
  const std::vector<int32_t> routed{0, 1};
  controller.Gate(testing::TopTwoGate(0, routed), &cmds);
  EXPECT_FALSE(controller.cache().Present({0, 5}));
  EXPECT_TRUE(controller.cache().Present({0, 0}));
  for (const tiers::CacheCommand& cmd : cmds)
    EXPECT_FALSE(cmd.kind == tiers::CacheCommand::kFetch && cmd.expert == (ExpertKey{0, 5}));
  const tiers::LayerCounters layer0 = controller.Counters()[0];
  EXPECT_EQ(layer0.prefetch_foreign, 1);
  EXPECT_EQ(layer0.prefetch_issued, 0);
  EXPECT_EQ(layer0.misses, 2);
}

// A job that throws on the worker thread is an error raised by the Poll that reaches it,
// in every mode; the worker goes on with later jobs.
TEST(PolicyTest, AFailingWorkerJobIsAnErrorNotACrash) {
  for (auto mode :
       {PolicyWorker::Mode::kAsync, PolicyWorker::Mode::kSync, PolicyWorker::Mode::kModelled}) {
    PolicyWorker worker(mode);
    worker.Submit(
        0, [](const int&) -> int { throw Error("job failed"); }, [](const int&, Decisions*) {});
    worker.Submit(
        ExpertKey{0, 1}, [](const ExpertKey& k) { return k; },
        [](const ExpertKey& k, Decisions* d) { d->cancel.push_back(k); });
    worker.Drain();
    Decisions d;
    EXPECT_THROW(worker.Flush(&d), Error);
    worker.Flush(&d);  // The next job's Apply still runs.
    EXPECT_EQ(d.cancel, (std::vector<ExpertKey>{{0, 1}}));
  }
}

// Belady's MIN at 4 slots over gates {A,B} {C,D} {E,F} {A,G} (layer:expert A=0:0 B=0:1
// C=1:0 D=1:1 E=2:0 F=2:1 G=0:2): A-D fill free slots; E evicts B (never used again, the
// lowest such key), F evicts C, G evicts D. The oracle fetches exactly these, each once its
// victim's last use is computed: E after B's compute in gate 0, F after C's and G after D's
// in gate 1.
TEST(PolicyTest, OracleIssuesMinsFetchesOnceTheirVictimIsDead) {
  PolicyFacts f = Facts();
  ASSERT_EQ(f.capacity_experts, 4);
  FutureDemand future;
  future.gates = {{{0, 0}, {0, 1}}, {{1, 0}, {1, 1}}, {{2, 0}, {2, 1}}, {{0, 0}, {0, 2}}};
  f.future = &future;
  auto p = MakePolicy("oracle", f);
  Decisions d;
  auto fetched = [&d] {
    std::vector<std::pair<ExpertKey, double>> out;
    for (const Prefetch& x : d.prefetch) out.push_back({x.expert, x.priority});
    d.Clear();
    return out;
  };
  using Fetches = std::vector<std::pair<ExpertKey, double>>;
  p->OnIterationBegin({}, &d);
  EXPECT_EQ(fetched(), (Fetches{{{0, 0}, -0.0}, {{0, 1}, -0.0}, {{1, 0}, -1}, {{1, 1}, -1}}));
  std::vector<int32_t> ids{0, 1};
  p->OnGate(testing::TopTwoGate(0, ids), &d);
  EXPECT_TRUE(fetched().empty());  // B is still being computed.
  p->OnExpertDone({0, 0}, &d);
  EXPECT_TRUE(fetched().empty());
  p->OnExpertDone({0, 1}, &d);
  EXPECT_EQ(fetched(), (Fetches{{{2, 0}, -2}}));
  p->OnGate(testing::TopTwoGate(1, ids), &d);
  EXPECT_TRUE(fetched().empty());
  p->OnExpertDone({1, 0}, &d);
  EXPECT_EQ(fetched(), (Fetches{{{2, 1}, -2}}));
  p->OnExpertDone({1, 1}, &d);
  EXPECT_EQ(fetched(), (Fetches{{{0, 2}, -3}}));
  p->OnGate(testing::TopTwoGate(2, ids), &d);
  p->OnExpertDone({2, 0}, &d);
  p->OnExpertDone({2, 1}, &d);
  EXPECT_TRUE(fetched().empty());  // Nothing more to fetch: A is still cached for gate 3.
}

TEST(PolicyTest, OracleLookaheadBoundsFetchesOnTheirWay) {
  PolicyFacts f = Facts();
  FutureDemand future;
  future.gates = {{{0, 0}, {0, 1}}, {{1, 0}, {1, 1}}};
  f.future = &future;
  auto p = MakePolicy("oracle:lookahead=3", f);
  Decisions d;
  p->OnIterationBegin({}, &d);
  ASSERT_EQ(d.prefetch.size(), 3u);  // The fourth waits until gate 0 is in compute.
  d.Clear();
  std::vector<int32_t> ids{0, 1};
  p->OnGate(testing::TopTwoGate(0, ids), &d);
  ASSERT_EQ(d.prefetch.size(), 1u);
  EXPECT_EQ(d.prefetch[0].expert, (ExpertKey{1, 1}));
}

}  // namespace
}  // namespace moex::policy

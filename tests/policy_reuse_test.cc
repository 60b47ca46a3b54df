// The `reuse` evictor, its pieces (gate cycle, next-use estimator, shadow cache), the
// `cycle-lru` baseline and the admission (bypass) mechanism, on hand-computed cases.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "policy/common/gate_cycle.h"
#include "policy/policy.h"
#include "policy/policy_state.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"
#include "policy/reuse/reuse_estimator.h"
#include "policy/reuse/shadow_cache.h"
#include "support/policy_events.h"
#include "tiers/cache_plan.h"
#include "tiers/offload_controller.h"

namespace moex::policy {
namespace {

TEST(GateCycleTest, CountsGatesUntilEachLayerAroundTheCycle) {
  GateCycle c({0, 1, 1, 0, 1});  // MoE layers 1, 2, 4.
  ASSERT_EQ(c.size(), 3);
  EXPECT_EQ(c.PositionOf(0), -1);
  EXPECT_EQ(c.PositionOf(4), 2);
  c.BeginPass();
  EXPECT_EQ(c.GatesUntil(1), 1);
  EXPECT_EQ(c.GatesUntil(2), 2);
  EXPECT_EQ(c.GatesUntil(4), 3);
  c.AfterGate(1);
  EXPECT_EQ(c.GatesUntil(1), 3);
  EXPECT_EQ(c.GatesUntil(2), 1);
  EXPECT_EQ(c.GatesUntil(4), 2);
  // Serving layer 2's gate: its unrouted experts wait a whole cycle after it.
  c.ServingGate(2);
  EXPECT_TRUE(c.Serving(2));
  EXPECT_EQ(c.GatesUntil(2), 4);
  EXPECT_EQ(c.GatesUntil(4), 2);
  EXPECT_EQ(c.GatesUntil(1), 3);
  c.AfterGate(2);
  EXPECT_FALSE(c.Serving(2));
  EXPECT_EQ(c.GatesUntil(4), 1);
  EXPECT_EQ(c.GatesUntil(1), 2);
  EXPECT_EQ(c.GatesUntil(2), 3);
  c.AfterGate(4);
  EXPECT_EQ(c.GatesUntil(1), 1);
  EXPECT_THROW(c.AfterGate(0), Error);  // Dense layers have no gate.
}

ReuseEstimator::Options AgeOnly(int horizon) {
  ReuseEstimator::Options o;
  o.horizon = horizon;
  o.min_samples = 1;
  o.features = {.age = true, .rate = false, .recent = false, .nextgate = false};
  return o;
}

void Gate(ReuseEstimator& e, int layer, std::vector<int32_t> ids) {
  e.ObserveGate(layer, ids.data(), static_cast<int64_t>(ids.size()));
}

TEST(ReuseEstimatorTest, LearnsTheMeanNextUseDistancePerAge) {
  // One layer, experts 0 and 1: 0 is routed at every gate, 1 at gates 1, 3, 5.
  ReuseEstimator e(1, 2, 1, AgeOnly(8));
  for (int t = 1; t <= 6; ++t)
    Gate(e, 0, t % 2 ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{0});
  // Samples by age before the gate (label: gates until routed, that gate included):
  //   never: expert 0 and 1 at gate 1, both labelled 1;
  //   age 0: expert 0 at gates 2..6 (label 1 each), expert 1 at gates 2 and 4 (label 2
  //          each: routed at 3 and 5); expert 1's gate-6 sample still waits;
  //   age 1: expert 1 at gates 3 and 5, labelled 1.
  EXPECT_EQ(e.samples(), 2 + 7 + 2);
  EXPECT_DOUBLE_EQ(e.ExpectedGates({0, 0}), 9.0 / 7.0);  // Age 0.
  EXPECT_DOUBLE_EQ(e.ExpectedGates({0, 1}), 1.0);        // Age 1 (last routed at gate 5).
  // After a gate that does not route expert 0, its age would be 1.
  EXPECT_DOUBLE_EQ(e.ExpectedGates({0, 0}, ReuseEstimator::When::kAfterMiss), 1.0);
  EXPECT_DOUBLE_EQ(e.ExpectedGates({0, 1}, ReuseEstimator::When::kAfterRoute), 9.0 / 7.0);
}

TEST(ReuseEstimatorTest, LabelsClampAtTheHorizon) {
  ReuseEstimator e(1, 2, 1, AgeOnly(4));
  for (int t = 1; t <= 6; ++t) Gate(e, 0, {0});
  // Expert 1 is never routed: its samples of gates 1, 2 and 3 are labelled 4 when their
  // wait reaches the horizon (at gates 4, 5 and 6). "never" also holds expert 0's gate-1
  // sample, labelled 1.
  EXPECT_DOUBLE_EQ(e.ExpectedGates({0, 1}), (3 * 4.0 + 1.0) / 4.0);
}

TEST(ReuseEstimatorTest, NextGatePredictionsAreAFeature) {
  ReuseEstimator::Options o = AgeOnly(8);
  o.features.age = false;
  o.features.nextgate = true;
  ReuseEstimator e(1, 3, 1, o);
  // Expert 2 is predicted before every gate and routed at every other one; expert 0 is
  // never predicted and routed at every gate.
  for (int t = 1; t <= 4; ++t) {
    e.SetPredicted(0, {2});
    Gate(e, 0, t % 2 ? std::vector<int32_t>{0, 2} : std::vector<int32_t>{0});
  }
  // "Predicted" samples: expert 2 at gates 1 (label 1), 2 (label 2), 3 (label 1); the
  // gate-4 one waits. "Not predicted": expert 0 (label 1 x 4), expert 1 (waiting).
  e.SetPredicted(0, {2});
  EXPECT_DOUBLE_EQ(e.ExpectedGates({0, 2}), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(e.ExpectedGates({0, 0}), 1.0);
}

TEST(ReuseEstimatorTest, StateRoundTripsAndRefusesAnotherHorizon) {
  ReuseEstimator a(1, 2, 1, AgeOnly(8));
  for (int t = 1; t <= 6; ++t)
    Gate(a, 0, t % 2 ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{0});
  StateWriter w;
  a.Save(w);
  ReuseEstimator b(1, 2, 1, AgeOnly(8));
  StateReader r({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "s");
  b.Load(r);
  r.ExpectEnd();
  // The tables came along (ages did not: a loaded state starts a new run).
  EXPECT_DOUBLE_EQ(b.ExpectedGates({0, 1}, ReuseEstimator::When::kAfterRoute), 9.0 / 7.0);
  EXPECT_DOUBLE_EQ(b.ExpectedGates({0, 0}), 1.0);  // "never": the gate-1 samples.
  ReuseEstimator c(1, 2, 1, AgeOnly(16));
  StateReader r2({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "s");
  EXPECT_THROW(c.Load(r2), Error);
  ReuseEstimator d(1, 3, 1, AgeOnly(8));  // Another number of experts.
  StateReader r3({reinterpret_cast<const std::byte*>(w.bytes().data()), w.bytes().size()}, "s");
  EXPECT_THROW(d.Load(r3), Error);
}

TEST(ShadowCacheTest, LruOnTheClassicAccessStringNeverHits) {
  // 0 1 2 0 1 3 0 1 2 with room for two: LRU hits nothing (as in SimBelady's hand case).
  ShadowCache s(1, 4, 2);
  std::vector<uint64_t> touched(4, 0);
  uint64_t clock = 0;
  int64_t hits = 0;
  for (int32_t x : {0, 1, 2, 0, 1, 3, 0, 1, 2}) {
    hits += s.Serve(
        {{0, x}}, [&](const ExpertKey& k) { return double(touched[k.expert]); }, nullptr);
    touched[static_cast<size_t>(x)] = ++clock;
  }
  EXPECT_EQ(hits, 0);
  EXPECT_EQ(s.size(), 2);
  // Refusing every miss once full keeps the first two: 0 and 1 then hit 4 times.
  ShadowCache keep(1, 4, 2);
  hits = 0;
  for (int32_t x : {0, 1, 2, 0, 1, 3, 0, 1, 2})
    hits += keep.Serve(
        {{0, x}}, [](const ExpertKey&) { return 0.0; },
        [](const ExpertKey&, double) { return false; });
  EXPECT_EQ(hits, 4);
  EXPECT_TRUE(keep.Holds({0, 0}) && keep.Holds({0, 1}));
}

// Facts and a controller for SmallPolicyConfig(layers): 6 experts per layer, top-2, one
// chunk per expert, room for `experts` experts.
struct Harness {
  Harness(const std::string& spec, int layers, int64_t experts) {
    static PolicyWorker worker(PolicyWorker::Mode::kSync);
    const ModelConfig c = testing::SmallPolicyConfig(layers);
    tiers::CacheGeometry g{c.num_layers, c.num_experts, c.moe_intermediate_size, 16, 64, experts};
    facts = tiers::MakePolicyFacts(c, g, 64, nullptr, 0);
    facts.worker = &worker;
    controller = std::make_unique<tiers::OffloadController>(
        g, MakePolicy(spec, facts), nullptr, std::vector<char>(static_cast<size_t>(layers), 1));
  }
  // One pass routing `ids` (two per token) at every layer.
  void Pass(const std::vector<int32_t>& ids) {
    std::vector<tiers::CacheCommand> out;
    controller->IterationBegin({}, &out);
    for (int l = 0; l < facts.num_layers; ++l) {
      for (const tiers::PlannedExpert& p : controller->Gate(testing::TopTwoGate(l, ids), &out))
        controller->ExpertDone({p.key.layer, p.key.expert}, &out);
    }
    controller->IterationEnd(&out);
  }
  tiers::LayerCounters Total() const {
    tiers::LayerCounters t;
    for (const tiers::LayerCounters& c : controller->Counters()) t.Add(c);
    return t;
  }
  PolicyFacts facts;
  std::unique_ptr<tiers::OffloadController> controller;
};

TEST(CycleLruTest, EvictsTheLayerThatJustRan) {
  // Hand-computed: 3 layers each routing experts {0, 1} every pass, room for 3 experts.
  // Pass 1 fills the cache and ends holding L0e1, L2e0, L2e1. Pass 2: layer 0 hits e1 and
  // evicts L2e0 (layer 2's gate is farthest); layer 1 evicts L0e0 and L0e1 (layer 0 just
  // ran); layer 2 hits e1. LRU evicts the layer that runs next and never hits.
  Harness cyc("cycle-lru", 3, 3), lru("lru", 3, 3);
  cyc.Pass({0, 1});
  lru.Pass({0, 1});
  EXPECT_EQ(cyc.Total().hits, 0);
  cyc.Pass({0, 1});
  lru.Pass({0, 1});
  EXPECT_EQ(cyc.Total().hits, 2);
  EXPECT_EQ(lru.Total().hits, 0);
}

TEST(ReuseTest, BypassKeepsAStableHotSetOnACycleLargerThanTheCache) {
  // The same cycle: 6 experts used in turn, room for 3. MIN with bypass keeps the first
  // three and streams the rest (3 hits per pass); LRU never hits.
  Harness reuse("reuse:guard=false", 3, 3), lru("lru", 3, 3);
  for (int p = 0; p < 10; ++p) {
    reuse.Pass({0, 1});
    lru.Pass({0, 1});
  }
  EXPECT_EQ(lru.Total().hits, 0);
  EXPECT_EQ(reuse.Total().hits, 3 * 9);
  EXPECT_EQ(reuse.Total().bypassed, 3 * 10);  // Pass 1: L1e1, L2e0, L2e1; then the same.
  EXPECT_EQ(reuse.Total().evictions, 0);
  EXPECT_EQ(reuse.Total().chunks_streamed, reuse.Total().bypassed);
  // Without admission every miss is inserted and evicts.
  Harness all("reuse:guard=false,admission=false", 3, 3);
  for (int p = 0; p < 10; ++p) all.Pass({0, 1});
  EXPECT_EQ(all.Total().bypassed, 0);
  EXPECT_GT(all.Total().evictions, 0);
}

TEST(ReuseTest, ScoresByTheCycleAndPrefetchesCountAsImminent) {
  auto p = MakePolicy("reuse:guard=false", Harness("lru", 3, 3).facts);
  Decisions d;
  p->OnIterationBegin({}, &d);
  std::vector<int32_t> ids{0, 1};
  p->OnGate(testing::TopTwoGate(0, ids), &d);
  // Same statistics, different place in the cycle: layer 1's gate is next, layer 0's last.
  EXPECT_GT(p->EvictScore({1, 4}), p->EvictScore({0, 4}));
  EXPECT_GT(p->EvictScore({2, 4}), p->EvictScore({0, 4}));
  EXPECT_GT(p->EvictScore({1, 4}), p->EvictScore({2, 4}));
  p->OnTouch({2, 5}, /*demand=*/false);  // A prefetch: used at layer 2's next gate.
  EXPECT_GT(p->EvictScore({2, 5}), p->EvictScore({2, 4}));
}

// Admission in the mechanism, with a policy that admits nothing.
class RefuseAll : public Policy {
 public:
  std::string name() const override { return "refuse-all"; }
  bool evicts() const override { return true; }
  bool decides_admission() const override { return true; }
  bool Admit(const ExpertKey&, double lowest) override {
    ++asked;
    last_lowest = lowest;
    return false;
  }
  double EvictScore(const ExpertKey& k) override { return 10.0 * k.layer + k.expert; }
  int asked = 0;
  double last_lowest = 0;
};

TEST(AdmissionTest, AMissNotAdmittedIsStreamedAndEvictsNothing) {
  const ModelConfig c = testing::SmallPolicyConfig(2);
  tiers::CacheGeometry g{c.num_layers, c.num_experts, c.moe_intermediate_size, 4, 64, 8};
  auto policy = std::make_unique<RefuseAll>();
  RefuseAll* refuse = policy.get();
  tiers::OffloadController ctl(g, std::move(policy), nullptr, {1, 1});
  std::vector<tiers::CacheCommand> out;
  std::vector<int32_t> a{0, 1}, b{2, 3};
  // Two experts of 4 chunks fill the 8 pages without asking (nothing to evict).
  for (const auto& p : ctl.Gate(testing::TopTwoGate(0, a), &out))
    ctl.ExpertDone({p.key.layer, p.key.expert}, &out);
  EXPECT_EQ(refuse->asked, 0);
  EXPECT_EQ(ctl.cache().used_pages(), 8);
  out.clear();
  for (const auto& p : ctl.Gate(testing::TopTwoGate(1, b), &out))
    ctl.ExpertDone({p.key.layer, p.key.expert}, &out);
  EXPECT_EQ(refuse->asked, 2);
  EXPECT_DOUBLE_EQ(refuse->last_lowest, 0.0);  // L0e0 scores lowest.
  for (const tiers::CacheCommand& cmd : out) EXPECT_NE(cmd.kind, tiers::CacheCommand::kFetch);
  const tiers::LayerCounters l1 = ctl.Counters()[1];
  EXPECT_EQ(l1.misses, 2);
  EXPECT_EQ(l1.bypassed, 2);
  EXPECT_EQ(l1.streamed, 0);
  EXPECT_EQ(l1.chunks_streamed, 8);
  EXPECT_EQ(l1.evictions + ctl.Counters()[0].evictions, 0);
  EXPECT_TRUE(ctl.cache().Present({0, 0}) && ctl.cache().Present({0, 1}));
}

TEST(ReuseTest, TheGuardFallsBackToRecencyWhenLruWouldHitMore) {
  // Learned: each pair of experts comes back three gates after its use (recently used =
  // far). Served: each pair is used twice in a row, which LRU catches (every second gate
  // hits) and the learned table calls far, so without the guard every miss is bypassed.
  auto run = [](const std::string& spec) {
    Harness h(spec, 1, 2);
    Decisions d;
    h.controller->policy().OnLearnBegin();
    for (int g = 0; g < 300; ++g) {
      std::vector<int32_t> ids{2 * (g % 3), 2 * (g % 3) + 1};
      h.controller->policy().OnGate(testing::TopTwoGate(0, ids), &d);
    }
    h.controller->policy().OnLearnEnd();
    for (int g = 0; g < 120; ++g) {
      const int32_t pair = (g / 2) % 3;
      h.Pass({2 * pair, 2 * pair + 1});
    }
    nlohmann::json report;
    h.controller->policy().ReportJson(&report);
    return std::make_pair(h.Total().hits, report["reuse"]["fallback_share"].get<double>());
  };
  const auto [guarded_hits, guarded_fallback] = run("reuse:min_samples=1");
  const auto [bare_hits, bare_fallback] = run("reuse:min_samples=1,guard=false");
  EXPECT_EQ(bare_fallback, 0.0);
  EXPECT_GT(guarded_fallback, 0.0);
  EXPECT_GT(guarded_hits, bare_hits) << guarded_hits << " against " << bare_hits;
}

TEST(ReuseTest, ReportsTheFeaturesItLacks) {
  Harness h("reuse", 3, 3);  // No router weights in these facts.
  h.Pass({0, 1});
  nlohmann::json report;
  h.controller->policy().ReportJson(&report);
  ASSERT_TRUE(report.contains("reuse")) << report.dump();
  EXPECT_EQ(report["reuse"]["missing"].size(), 1u);
  for (const auto& f : report["reuse"]["features"]) EXPECT_NE(f, "nextgate");
  EXPECT_GT(report["reuse"]["samples"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace moex::policy

// MoEpic (src/policy/moepic/): hand-computed LCP priorities and eviction order, the
// configurator's statistics, sub-problem and budget allocation on hand-solved instances, the
// split cache's per-layer budgets under a real OffloadController, and split experts that
// compute exactly the resident result.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/moe_executor.h"
#include "model/model.h"
#include "policy/moepic/moepic_configurator.h"
#include "policy/moepic/moepic_lcp.h"
#include "policy/policy_state.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"
#include "support/engine_runs.h"
#include "support/policy_events.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"
#include "tiers/offload_controller.h"

namespace moex {
namespace {

using policy::ExpertPriorities;
using policy::LayerStatistics;

// Eq. (4) with the paper's defaults: ρ = 0.25, ω = 128, so the priority halves every 64
// idle tokens.
TEST(MoepicLcp, PriorityFollowsEquationFour) {
  EXPECT_DOUBLE_EQ(policy::LcpPriority(8, 0, 0.25, 128), 8);
  EXPECT_DOUBLE_EQ(policy::LcpPriority(8, 64, 0.25, 128), 4);
  EXPECT_DOUBLE_EQ(policy::LcpPriority(8, 128, 0.25, 128), 2);
  EXPECT_DOUBLE_EQ(policy::LcpPriority(10, 256, 0.25, 128), 0.625);
  EXPECT_DOUBLE_EQ(policy::LcpPriority(0, 0, 0.25, 128), 0);
}

// Four one-token gates over three experts with ρ = 0.5, ω = 2:
//   gate 1 routes {0,1}: μ = (1,1,0), ν = (0,0,1)
//   gate 2 routes {0}:   μ = (2,1,0), ν = (0,1,2)
//   gate 3 routes {2}:   μ = (2,1,1), ν = (1,2,0)
//   gate 4 routes {0}:   μ = (3,1,1), ν = (0,3,1)
// LCP: 3, 0.5^1.5 = 0.354, 0.5^0.5 = 0.707 -> expert 1 is evicted first.
TEST(MoepicLcp, HandComputedCountersAndEvictionOrder) {
  ExpertPriorities lcp(1, 3, ExpertPriorities::Kind::kLcp, 0.5, 2, 0);
  const std::vector<std::vector<int32_t>> gates = {{0, 1}, {0}, {2}, {0}};
  for (const auto& g : gates) lcp.Observe(0, g.data(), static_cast<int64_t>(g.size()), 1);
  EXPECT_EQ(lcp.mu(0, 0), 3);
  EXPECT_EQ(lcp.mu(0, 1), 1);
  EXPECT_EQ(lcp.mu(0, 2), 1);
  EXPECT_EQ(lcp.nu(0, 0), 0);
  EXPECT_EQ(lcp.nu(0, 1), 3);
  EXPECT_EQ(lcp.nu(0, 2), 1);
  EXPECT_DOUBLE_EQ(lcp.Priority(0, 0), 3);
  EXPECT_NEAR(lcp.Priority(0, 1), std::pow(0.5, 1.5), 1e-12);
  EXPECT_NEAR(lcp.Priority(0, 2), std::pow(0.5, 0.5), 1e-12);
  EXPECT_EQ(lcp.Ranking(0), (std::vector<int32_t>{0, 2, 1}));

  // The same gates under the ablation priorities: LFU ties on μ go to the lower id, LRU
  // orders by the interval.
  ExpertPriorities lfu(1, 3, ExpertPriorities::Kind::kLfu, 0.5, 2, 0);
  ExpertPriorities lru(1, 3, ExpertPriorities::Kind::kLru, 0.5, 2, 0);
  for (const auto& g : gates) {
    lfu.Observe(0, g.data(), static_cast<int64_t>(g.size()), 1);
    lru.Observe(0, g.data(), static_cast<int64_t>(g.size()), 1);
  }
  EXPECT_EQ(lfu.Ranking(0), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(lru.Ranking(0), (std::vector<int32_t>{0, 2, 1}));
}

TEST(MoepicLcp, PrefillTokensCountOncePerToken) {
  // One pass of 5 tokens: expert 0 picked by 3 of them, expert 1 by 2, expert 2 by none.
  ExpertPriorities lcp(1, 3, ExpertPriorities::Kind::kLcp, 0.25, 128, 0);
  const std::vector<int32_t> ids = {0, 1, 0, 0, 1};
  lcp.Observe(0, ids.data(), 5, 5);
  EXPECT_EQ(lcp.mu(0, 0), 3);
  EXPECT_EQ(lcp.mu(0, 1), 2);
  EXPECT_EQ(lcp.nu(0, 2), 5);
}

TEST(MoepicLcp, BadInputsAreClearErrors) {
  EXPECT_THROW(ExpertPriorities(1, 3, ExpertPriorities::Kind::kLcp, 1.0, 128, 0), Error);
  EXPECT_THROW(ExpertPriorities(1, 3, ExpertPriorities::Kind::kLcp, 0.25, 0, 0), Error);
  EXPECT_THROW(policy::ResolvePolicySpec("moepic:evict=mru"), Error);
  ExpertPriorities lcp(1, 3, ExpertPriorities::Kind::kLcp, 0.25, 128, 0);
  const int32_t bad = 3;
  EXPECT_THROW(lcp.Observe(0, &bad, 1, 1), Error);
  EXPECT_THROW(lcp.Observe(1, &bad, 0, 1), Error);
}

// Two gates over four experts (K = 2):
//   gate 1: priority rank of expert x = x; routed {0,2}; predicted order 2,1,0,3
//   gate 2: ranks (1,0,3,2);               routed {1,3}; predicted order 1,3,0,2
LayerStatistics TwoGateStatistics() {
  LayerStatistics s(4);
  s.Observe({0, 1, 2, 3}, {0, 2}, {2, 1, 0, 3});
  s.Observe({1, 0, 3, 2}, {1, 3}, {1, 3, 0, 2});
  return s;
}

TEST(MoepicConfigurator, StatisticsByHand) {
  const LayerStatistics s = TwoGateStatistics();
  EXPECT_EQ(s.K(), 2);
  // Activated experts sat at priority ranks 0, 2, 0, 2.
  EXPECT_EQ(s.H(1), 0.5);
  EXPECT_EQ(s.H(2), 0.5);
  EXPECT_EQ(s.H(3), 1.0);
  // The 1st prediction was right twice, the 2nd and 3rd once each, the 4th never.
  EXPECT_EQ(s.P(1), 1.0);
  EXPECT_EQ(s.P(2), 0.5);
  EXPECT_EQ(s.P(3), 0.5);
  EXPECT_EQ(s.P(4), 0.0);
  // The 1st predicted expert had priority rank 2, then 0.
  EXPECT_EQ(s.PH(1, 1), 0.5);
  EXPECT_EQ(s.PH(1, 3), 1.0);
  EXPECT_EQ(s.PH(2, 2), 0.5);  // Ranks 1 then 2.
  EXPECT_EQ(s.PH(3, 1), 0.5);  // Ranks 0 then 1.
  EXPECT_EQ(s.PH(4, 4), 1.0);
}

policy::ConfiguratorInputs SmallInputs() {
  policy::ConfiguratorInputs in;
  in.t_load = 1;
  in.t_exp = 0.25;
  in.num_experts = 4;
  in.chunks = 2;
  in.max_prefetch = 4;
  return in;
}

// Eq. (11) for V = 1 expert (2 chunks) and a window of one expert load:
//  C = 1 (θ = 1):   m = 2·H(1)·1 = 1; y=1: share 1-PH(1,1)·1 = 0.5 fits (0.5 ms), +0.5·P(1);
//                   y=2: share 1 does not fit (1.5 ms) -> m = 1.5
//  C = 2 (θ = 0.5): m = 2·0.5·0.5 = 0.5; y=1: share 1-0.5·0.5 = 0.75, +0.75; y=2: 1.5 ms
//                   does not fit -> m = 1.25
//  C ≥ 3: θ under one chunk; no cache: y=1 fits exactly -> m = P(1) = 1.
// Best C = 1, θ = 1, m = 1.5; exposed = (2-1.5)·1 - 1.5·0.25 = 0.125 ms.
TEST(MoepicConfigurator, SubProblemHandSolved) {
  const LayerStatistics s = TwoGateStatistics();
  const policy::LayerChoice c = policy::SolveLayer(s, 1.0, 1.0, SmallInputs());
  EXPECT_EQ(c.cache_size, 1);
  EXPECT_EQ(c.top_chunks, 2);
  EXPECT_DOUBLE_EQ(c.m, 1.5);
  EXPECT_DOUBLE_EQ(c.exposed_ms, 0.125);

  // A window of two loads: C = 1 reaches m = 0.5·2+0.5+0.5+0.25 = 2.25, capped at K = 2;
  // C = 2 reaches 1.875.
  const policy::LayerChoice wide = policy::SolveLayer(s, 1.0, 2.0, SmallInputs());
  EXPECT_EQ(wide.cache_size, 1);
  EXPECT_DOUBLE_EQ(wide.m, 2.0);
  EXPECT_DOUBLE_EQ(wide.exposed_ms, 0.0);

  // θ fixed at one chunk of two (0.5): only C = V/θ = 2 is tried.
  policy::ConfiguratorInputs fixed = SmallInputs();
  fixed.fixed_top_chunks = 1;
  const policy::LayerChoice half = policy::SolveLayer(s, 1.0, 1.0, fixed);
  EXPECT_EQ(half.cache_size, 2);
  EXPECT_EQ(half.top_chunks, 1);
  EXPECT_DOUBLE_EQ(half.m, 1.25);
}

// Two layers, no prefetching, θ in whole experts, loads never hidden (T_exp = 0):
//  layer A: every activation at priority rank 0 (H(1) = 1); layer B: half at rank 0.
// From V = (0.5, 0.5) (no layer can cache a whole expert) moving ζ·V_e = 0.5:
//  iteration 1: +0.5 profits A by 1 (exposed 1 -> 0), B by 0.5; taking 0.5 from B costs 0
//               -> V = (1, 0), total exposed 2 -> 1: accepted;
//  iteration 2: B has nothing left to give -> stop. Answer V = (1, 0), θ_A = 1, C_A = 1.
TEST(MoepicConfigurator, BudgetAllocationHandSolved) {
  LayerStatistics a(2), b(2);
  for (int i = 0; i < 10; ++i) a.Observe({0, 1}, {0}, {});
  for (int i = 0; i < 5; ++i) {
    b.Observe({0, 1}, {0}, {});
    b.Observe({0, 1}, {1}, {});
  }
  policy::ConfiguratorInputs in;
  in.t_load = 1;
  in.t_exp = 0;
  in.num_experts = 2;
  in.chunks = 1;
  in.max_prefetch = 0;
  const policy::Configuration start = policy::ExpertSplit({a, b}, {0.5, 0.5}, in);
  EXPECT_DOUBLE_EQ(start.exposed_ms, 2);

  const policy::Configuration c = policy::AllocateBudgets({a, b}, {0.5, 0.5}, 0.5, in);
  ASSERT_EQ(c.layers.size(), 2u);
  EXPECT_DOUBLE_EQ(c.layers[0].budget, 1.0);
  EXPECT_DOUBLE_EQ(c.layers[1].budget, 0.0);
  EXPECT_EQ(c.layers[0].cache_size, 1);
  EXPECT_EQ(c.layers[0].top_chunks, 1);
  EXPECT_EQ(c.layers[1].cache_size, 0);
  EXPECT_DOUBLE_EQ(c.exposed_ms, 1);
  EXPECT_EQ(c.iterations, 1);
}

// Eq. (7): layer 2's window is what layer 1's MoE leaves after its loads, plus attention.
TEST(MoepicConfigurator, WindowsChainAcrossLayers) {
  LayerStatistics a(2);
  for (int i = 0; i < 4; ++i) a.Observe({0, 1}, {0}, {});
  policy::ConfiguratorInputs in;
  in.t_load = 1;
  in.t_exp = 0.5;
  in.t_att = 0.2;
  in.t_head = 0.3;
  in.num_experts = 2;
  in.chunks = 1;
  const policy::Configuration c = policy::ExpertSplit({a, a}, {1, 0}, in);
  EXPECT_DOUBLE_EQ(c.layers[0].window_ms, 0.5);  // T_head + T_att.
  // Layer 1 caches its one activated expert: hide 0.5, miss 0 -> window 0.5 - 0 + 0.2.
  EXPECT_DOUBLE_EQ(c.layers[1].window_ms, 0.7);
  EXPECT_DOUBLE_EQ(c.layers[1].exposed_ms, 1.0);  // Nothing cached, nothing prefetched.
}

TEST(MoepicConfigurator, BadInputsAreClearErrors) {
  LayerStatistics s(2);
  EXPECT_THROW(s.Observe({0}, {0}, {}), Error);     // Ranks of the wrong size.
  EXPECT_THROW(s.Observe({0, 1}, {2}, {}), Error);  // Unknown expert.
  policy::ConfiguratorInputs in = SmallInputs();
  EXPECT_THROW(policy::ExpertSplit({s}, {1, 1}, in), Error);
  EXPECT_THROW(policy::AllocateBudgets({s, s}, {1, 1}, 0, in), Error);
  EXPECT_THROW(policy::AllocateBudgets({s, s}, {1, 1}, 1, in), Error);
}

// ---------------------------------------------------------------------------------------
// The policy under a real OffloadController, on random routing with a skewed gate.

struct Harness {
  static constexpr int kLayers = 3, kExperts = 8, kTopK = 2, kNeurons = 16, kChunk = 4, kD = 6;
  policy::PolicyFacts facts;
  std::vector<std::vector<float>> routers;
  std::unique_ptr<tiers::OffloadController> controller;
  policy::Policy* policy = nullptr;

  Harness(const std::string& spec, int64_t capacity_pages) {
    std::mt19937 rng(11);
    std::normal_distribution<float> n(0, 1);
    for (int l = 0; l < kLayers; ++l) {
      routers.emplace_back(kExperts * kD);
      for (float& w : routers.back()) w = n(rng);
    }
    facts.model_name = "test";
    facts.num_layers = kLayers;
    facts.moe_layer.assign(kLayers, 1);
    facts.num_experts = kExperts;
    facts.top_k = kTopK;
    facts.hidden_size = kD;
    facts.neurons = kNeurons;
    facts.chunk_neurons = kChunk;
    facts.expert_bytes = 1024;
    facts.page_bytes = 256;
    facts.capacity_pages = capacity_pages;
    facts.capacity_experts = capacity_pages / (kNeurons / kChunk);
    facts.router_weights = [this](int l) { return routers[static_cast<size_t>(l)]; };
    auto worker = std::make_unique<policy::PolicyWorker>(policy::PolicyWorker::Mode::kSync);
    facts.worker = worker.get();
    tiers::CacheGeometry g;
    g.num_layers = kLayers;
    g.num_experts = kExperts;
    g.neurons = kNeurons;
    g.chunk_neurons = kChunk;
    g.page_bytes = 256;
    g.capacity_pages = capacity_pages;
    auto p = policy::MakePolicy(spec, facts);
    policy = p.get();
    controller = std::make_unique<tiers::OffloadController>(g, std::move(p), std::move(worker),
                                                            facts.moe_layer);
  }

  // One decode pass: every layer's gate from a random hidden state, then its experts done.
  void Pass(int64_t iteration, std::mt19937& rng) {
    std::vector<tiers::CacheCommand> cmds;
    const int64_t request = 1, count = 1;
    const int32_t token = 5;
    policy::IterationBeginEvent b;
    b.iteration = iteration;
    b.n_requests = 1;
    b.requests = &request;
    b.token_counts = &count;
    b.tokens = &token;
    b.n_tokens = 1;
    controller->IterationBegin(b, &cmds);
    std::normal_distribution<float> n(0, 1);
    std::vector<float> h(kD);
    for (float& x : h) x = n(rng);
    for (int l = 0; l < kLayers; ++l) {
      for (float& x : h) x = 0.8f * x + 0.2f * n(rng);  // Neighbouring layers stay close.
      std::vector<float> logits(kExperts);
      for (int e = 0; e < kExperts; ++e) {
        logits[static_cast<size_t>(e)] = 0;
        for (int j = 0; j < kD; ++j)
          logits[static_cast<size_t>(e)] +=
              routers[static_cast<size_t>(l)][static_cast<size_t>(e * kD + j)] *
              h[static_cast<size_t>(j)];
      }
      std::vector<int32_t> ids(kExperts);
      for (int e = 0; e < kExperts; ++e) ids[static_cast<size_t>(e)] = e;
      std::partial_sort(ids.begin(), ids.begin() + kTopK, ids.end(), [&](int32_t a, int32_t c) {
        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(c)];
      });
      ids.resize(kTopK);
      const std::vector<float> weights(kTopK, 0.5f);
      policy::GateEvent g;
      g.layer = l;
      g.n_tokens = 1;
      g.top_k = kTopK;
      g.num_experts = kExperts;
      g.ids = ids.data();
      g.weights = weights.data();
      g.hidden = h.data();
      g.d = kD;
      const auto plan = controller->Gate(testing::Routed(g), &cmds);
      for (const auto& p : plan) controller->ExpertDone({p.key.layer, p.key.expert}, &cmds);
    }
    controller->IterationEnd(&cmds);
  }

  nlohmann::json Report() const {
    nlohmann::json r;
    policy->ReportJson(&r);
    return r;
  }
};

// Between passes, every layer but the first holds only its cached tops: at most C_i of
// them, θ_i·F each, so within its budget V_i (the first layer may also hold the next
// pass's prefetches, within the buffer). The configurator runs (τ = 16 tokens) and moves
// budget between layers without ever breaking this.
TEST(MoepicPolicy, LayersStayWithinTheirBudgets) {
  const int chunks = Harness::kNeurons / Harness::kChunk;
  Harness h("moepic:tau=16,load_ms=1,expert_ms=0.1,attn_ms=0.05,head_ms=0.1,zeta=0.05", 40);
  std::mt19937 rng(3);
  for (int64_t it = 0; it < 200; ++it) {
    h.Pass(it, rng);
    const nlohmann::json r = h.Report()["moepic"];
    const double total = r["budget_experts"].get<double>();
    EXPECT_EQ(total, static_cast<double>(40 - 2 * Harness::kTopK * chunks) / chunks);
    double sum = 0;
    for (const auto& l : r["layers"]) {
      const int layer = l["layer"];
      const int64_t tops = l["cache_size"].get<int64_t>() * l["top_chunks"].get<int64_t>();
      EXPECT_LE(tops, static_cast<int64_t>(
                          std::floor(l["budget_experts"].get<double>() * chunks + 1e-9)));
      sum += l["budget_experts"].get<double>();
      const int64_t used = h.controller->cache().used_pages(layer);
      if (layer == 0)
        EXPECT_LE(used, tops + Harness::kTopK * chunks) << "pass " << it;
      else
        EXPECT_LE(used, tops) << "layer " << layer << " after pass " << it;
    }
    EXPECT_NEAR(sum, total, 1e-9);
  }
  const nlohmann::json r = h.Report()["moepic"];
  EXPECT_GT(r["reconfigurations"].get<int>(), 0);
  const auto counters = h.controller->Counters();
  int64_t hits = 0, partial = 0, issued = 0;
  for (const auto& c : counters) {
    hits += c.hits;
    partial += c.partial_hits;
    issued += c.prefetch_issued;
  }
  EXPECT_GT(hits, 0);
  EXPECT_GT(partial, 0);  // Cached tops met by a demand read of the bottom.
  EXPECT_GT(issued, 0);
}

// What a run learned (statistics, priorities) is saved with --policy-state; loaded under
// another budget, the configurator re-runs for that budget (a budget sweep learns once and
// loads the state at every budget); under the same budget the tuned configuration stays.
TEST(MoepicPolicy, LoadedStateIsReconfiguredForTheBudget) {
  const int chunks = Harness::kNeurons / Harness::kChunk;
  const std::string spec = "moepic:tau=16,load_ms=1,expert_ms=0.1,attn_ms=0.05,head_ms=0.1";
  Harness small(spec, 40);
  std::mt19937 rng(5);
  for (int64_t it = 0; it < 100; ++it) small.Pass(it, rng);
  const nlohmann::json learned = small.Report()["moepic"];
  ASSERT_GT(learned["reconfigurations"].get<int>(), 0);
  const std::string state = policy::EncodePolicyState(*small.policy, small.facts);
  const auto bytes = std::as_bytes(std::span(state.data(), state.size()));

  Harness same(spec, 40);
  policy::DecodePolicyState(*same.policy, same.facts, bytes, "state");
  const nlohmann::json kept = same.Report()["moepic"];
  for (size_t i = 0; i < kept["layers"].size(); ++i)
    EXPECT_EQ(kept["layers"][i]["budget_experts"], learned["layers"][i]["budget_experts"]);

  Harness large(spec, 80);
  policy::DecodePolicyState(*large.policy, large.facts, bytes, "state");
  const nlohmann::json r = large.Report()["moepic"];
  const double total = static_cast<double>(80 - 2 * Harness::kTopK * chunks) / chunks;
  EXPECT_EQ(r["budget_experts"].get<double>(), total);
  double sum = 0;
  int64_t cached = 0;
  for (const auto& l : r["layers"]) {
    sum += l["budget_experts"].get<double>();
    cached += l["cache_size"].get<int64_t>() * l["top_chunks"].get<int64_t>();
    EXPECT_LE(l["cache_size"].get<int64_t>() * l["top_chunks"].get<int64_t>(),
              static_cast<int64_t>(std::floor(l["budget_experts"].get<double>() * chunks + 1e-9)));
  }
  EXPECT_NEAR(sum, total, 1e-9);
  // The larger budget is used: more than the small budget's whole allowance is cached.
  EXPECT_GT(cached, static_cast<int64_t>(40 - 2 * Harness::kTopK * chunks));
}

// Cache Only (θ = 1, no prefetch): whole experts, nothing prefetched, the uniform split.
TEST(MoepicPolicy, CacheOnlyAblationCachesWholeExperts) {
  Harness h("moepic:theta=1,prefetch=none,budgets=uniform", 24);
  std::mt19937 rng(5);
  for (int64_t it = 0; it < 50; ++it) h.Pass(it, rng);
  const nlohmann::json r = h.Report()["moepic"];
  for (const auto& l : r["layers"]) {
    EXPECT_EQ(l["theta"].get<double>(), 1.0);
    EXPECT_EQ(l["cache_size"].get<int>(), 2);  // 24 pages / 3 layers / 4 chunks.
  }
  int64_t issued = 0, partial = 0;
  for (const auto& c : h.controller->Counters()) {
    issued += c.prefetch_issued;
    partial += c.partial_hits;
  }
  EXPECT_EQ(issued, 0);
  EXPECT_EQ(partial, 0);
}

TEST(MoepicPolicy, BadSpecsAreClearErrors) {
  EXPECT_THROW(Harness("moepic:theta=2", 24), Error);
  EXPECT_THROW(Harness("moepic:evict=mru", 24), Error);
  EXPECT_THROW(Harness("moepic:rho=1", 24), Error);
  EXPECT_THROW(Harness("moepic:prefetch=psychic", 24), Error);
}

// A split expert computes exactly the resident result: tops of 1, 2 and 3 chunks of 4
// stay cached while the bottoms stream, and the logits are bit-identical.
TEST(MoepicPolicy, SplitExpertsComputeTheResidentResult) {
  auto model = LoadModel(testing::ChunkedTinyModelPath(Arch::kOlmoe));
  const std::vector<int32_t> prompt = {3, 141, 59, 26, 53, 58, 97, 93, 23, 84};
  ResidentMoeExecutor resident(*model);
  const std::vector<float> want = testing::PrefillLogits(*model, resident, prompt);
  const auto want_tokens = testing::GreedyTokens(*model, resident);
  testing::TempDir dir;
  for (const char* theta : {"0.25", "0.5", "0.75"}) {
    SCOPED_TRACE(theta);
    OffloadOptions o;
    o.store_path = dir / "experts.moex";
    o.host_budget = "50%";
    o.policy.spec = std::string("moepic:budgets=uniform,theta=") + theta;
    o.policy.worker = policy::PolicyWorker::Mode::kSync;
    o.chunk_neurons = testing::kChunkNeurons;
    o.progress = false;
    OffloadMoeExecutor offload(*model, o);
    EXPECT_EQ(testing::PrefillLogits(*model, offload, prompt), want);
    EXPECT_EQ(testing::GreedyTokens(*model, offload), want_tokens);
    const tiers::OffloadMetrics m = offload.Metrics();
    EXPECT_GT(m.total.counters.partial_hits, 0);  // Some expert computed from a cached top.
    EXPECT_LE(m.peak_host_cache_bytes, m.budget_bytes);
  }
}

}  // namespace
}  // namespace moex

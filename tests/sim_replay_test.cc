// The simulator replays a trace through the engine's own cache and policy objects, so its
// demand hits and misses equal the engine's for the same run; Belady's MIN bounds every
// policy; the link and cost models match hand-computed cases.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "policy/policy.h"
#include "policy/registry.h"
#include "sim/cost_model.h"
#include "sim/hardware_profile.h"
#include "sim/link_model.h"
#include "sim/replay.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"
#include "trace/trace_reader.h"
#include "trace/trace_recorder.h"

namespace moex {
namespace {

std::vector<GenerationRequest> Requests() {
  GenerationRequest a, b, c;
  a.prompt = {5, 9, 200, 31, 7, 64, 12, 90};
  a.max_tokens = 12;
  b.prompt = {77, 3};
  b.max_tokens = 5;
  c.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  c.max_tokens = 9;
  return {a, b, c};
}

// Two generate calls (a batch of two, then one alone), as `trace record --batch 2` does.
void RunRequests(Transformer& t) {
  Generator g(t);
  const auto r = Requests();
  g.Generate({r[0], r[1]});
  g.Generate({r[2]});
}

// Records RunRequests on the resident executor, with exact gate inputs and the routers so
// next-gate speculation replays as the engine ran it.
void RecordRun(const Model& model, const std::string& path, trace::Precision probs) {
  ResidentMoeExecutor resident(model);
  Transformer t(model, resident);
  trace::TraceHeader h;
  h.source = "test";
  h.model = trace::TraceModelOf(model);
  h.probs = probs;
  h.hidden = trace::Precision::kF32;
  h.router_weights = true;
  trace::TraceWriter writer(path, h);
  trace::TraceRecorder recorder(writer, model);
  t.AddSink(&recorder);
  RunRequests(t);
  writer.Finish();
}

sim::HardwareProfile TestHardware() {
  sim::HardwareProfile hw;
  hw.name = "test";
  hw.compute_gb_per_s = 10;
  hw.compute_tflops = 1;
  hw.link_gb_per_s = 1;
  return hw;
}

class SimAgreementTest : public ::testing::TestWithParam<Arch> {};

TEST_P(SimAgreementTest, ReplayGivesTheEnginesExactCounts) {
  testing::TempDir dir;
  auto model = LoadModel(testing::TinyModelPath(GetParam()));
  RecordRun(*model, dir / "run.trace", trace::Precision::kF32);
  trace::TraceReader reader(dir / "run.trace");
  for (const char* budget : {"5%", "25%", "50%", "100%"}) {
    for (const char* policy : {"lru", "lfu", "random", "nextgate", "nextgate+lfu"}) {
      SCOPED_TRACE(std::string(policy) + " at " + budget);
      OffloadOptions o;
      o.store_path = dir / "experts.moex";
      o.host_budget = budget;
      o.policy.spec = policy;
      o.policy.seed = 3;
      o.progress = false;
      OffloadMoeExecutor offload(*model, o);
      Transformer t(*model, offload);
      RunRequests(t);
      const tiers::LayerCounters engine = offload.Metrics().total.counters;

      sim::ReplayOptions so;
      so.policy.spec = policy;
      so.budget = budget;
      so.policy.seed = 3;
      so.hardware = TestHardware();
      const sim::ReplayResult r = sim::Replay(reader, so);
      EXPECT_GT(engine.hits + engine.misses, 0);
      EXPECT_EQ(r.total.hits, engine.hits);
      EXPECT_EQ(r.total.misses, engine.misses);
      EXPECT_EQ(r.total.streamed, engine.streamed);
      EXPECT_EQ(r.total.evictions, engine.evictions);
      EXPECT_EQ(r.total.prefetch_issued, engine.prefetch_issued);
      EXPECT_EQ(r.total.prefetch_used, engine.prefetch_used);
      EXPECT_EQ(r.total.prefetch_cancelled, engine.prefetch_cancelled);
      EXPECT_EQ(r.total.prefetch_wasted, engine.prefetch_wasted);
      EXPECT_EQ(r.budget_bytes, offload.Metrics().budget_bytes);
      EXPECT_EQ(r.requests, 3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, SimAgreementTest,
                         ::testing::Values(Arch::kOlmoe, Arch::kMixtral, Arch::kDeepseekMoe,
                                           Arch::kDeepseekV2, Arch::kDeepseekV3, Arch::kGlm4Moe,
                                           Arch::kGptOss, Arch::kMiniMaxM2, Arch::kQwen3Next,
                                           Arch::kQwen35Moe, Arch::kLlama4),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

// One MoE layer of 4 experts, top-1, experts of exactly one 4 KiB page; a budget of
// `pages` pages holds that many experts. One request, one token per pass.
trace::TraceHeader ToyHeader() {
  trace::TraceHeader h;
  h.source = "test";
  h.model.name = "toy";
  h.model.num_layers = 1;
  h.model.moe_layers = {0};
  h.model.num_experts = 4;
  h.model.top_k = 1;
  h.model.hidden_size = 8;
  h.model.expert_neurons = 4;
  h.model.record_bytes = 1024;
  h.model.block_neurons = 4;
  h.model.dtype = "bf16";
  return h;
}

void WriteSequence(const std::string& path, const trace::TraceHeader& h,
                   const std::vector<std::vector<int32_t>>& gates) {
  trace::TraceWriter w(path, h);
  trace::TraceEvent begin;
  begin.kind = trace::TraceEvent::kRequestBegin;
  begin.prompt = {1};
  w.Write(begin);
  for (size_t i = 0; i < gates.size(); ++i) {
    trace::TraceEvent e;
    e.kind = trace::TraceEvent::kIteration;
    e.iteration.iteration = static_cast<int64_t>(i);
    e.iteration.requests = {0};
    e.iteration.token_counts = {1};
    e.iteration.tokens = {1};
    trace::TraceGate g;
    g.layer = 0;
    g.n_tokens = 1;
    g.top_k = h.model.top_k;
    g.ids = gates[i];
    g.weights.assign(gates[i].size(), 1.0f / static_cast<float>(gates[i].size()));
    e.iteration.gates.push_back(g);
    w.Write(e);
  }
  trace::TraceEvent end;
  end.kind = trace::TraceEvent::kRequestEnd;
  w.Write(end);
  w.Finish();
}

sim::ReplayResult ReplayToy(trace::TraceReader& reader, const std::string& policy,
                            const std::string& budget) {
  sim::ReplayOptions o;
  o.policy.spec = policy;
  o.budget = budget;
  o.hardware = TestHardware();
  const policy::FutureDemand future = sim::ReadFutureDemand(reader);
  return sim::Replay(reader, o, &future);
}

// Access string 0 1 2 0 1 3 0 1 2 with room for two experts.
// LRU: every access misses (9 misses, 7 evictions).
// MIN: 0m 1m 2m(evict 1: next use 4 > 3) 0h 1m(evict 2: next 8 > 6) 3m(evict 1: 7 > 6)
//      0h 1m(0 and 3 never used again: tie, lower key 0 goes) 2m(1 and 3 unused: 1 goes)
//      = 2 hits, 7 misses, 5 evictions.
TEST(SimBelady, HandComputedAccessString) {
  testing::TempDir dir;
  WriteSequence(dir / "toy.trace", ToyHeader(), {{0}, {1}, {2}, {0}, {1}, {3}, {0}, {1}, {2}});
  trace::TraceReader reader(dir / "toy.trace");
  const sim::ReplayResult lru = ReplayToy(reader, "lru", "8192");
  EXPECT_EQ(lru.capacity_experts, 2);
  EXPECT_EQ(lru.total.hits, 0);
  EXPECT_EQ(lru.total.misses, 9);
  EXPECT_EQ(lru.total.evictions, 7);
  const sim::ReplayResult min = ReplayToy(reader, "belady", "8192");
  EXPECT_EQ(min.total.hits, 2);
  EXPECT_EQ(min.total.misses, 7);
  EXPECT_EQ(min.total.evictions, 5);
  // MIN with bypass keeps 0 and 1: 2 (used at 9) and 3 (never again) are used later than
  // both and go through staging; the last 2 ties with them (no future use) and is inserted.
  const sim::ReplayResult bypass = ReplayToy(reader, "belady:bypass=true", "8192");
  EXPECT_EQ(bypass.total.hits, 4);
  EXPECT_EQ(bypass.total.misses, 5);
  EXPECT_EQ(bypass.total.bypassed, 2);
  EXPECT_EQ(bypass.total.evictions, 1);
}

// Belady bounds every policy: no demand-only policy has more hits, and no policy loads
// fewer experts (demand misses plus prefetches). Policies that may bypass the cache
// (`admission`) are bounded by MIN with bypass, which itself never does worse than MIN.
void ExpectBeladyBoundsAll(trace::TraceReader& reader, const std::vector<std::string>& policies,
                           bool admission = false) {
  const policy::FutureDemand future = sim::ReadFutureDemand(reader);
  for (const char* budget : {"5%", "10%", "25%", "50%", "75%"}) {
    sim::ReplayOptions o;
    o.hardware = TestHardware();
    o.budget = budget;
    o.policy.spec = "belady";
    const sim::ReplayResult min = sim::Replay(reader, o, &future);
    o.policy.spec = "belady:bypass=true";
    const sim::ReplayResult min_bypass = sim::Replay(reader, o, &future);
    EXPECT_GE(min_bypass.total.hits, min.total.hits);
    const sim::ReplayResult& best = admission ? min_bypass : min;
    for (const std::string& p : policies) {
      SCOPED_TRACE(p + " at " + budget);
      o.policy.spec = p;
      const sim::ReplayResult r = sim::Replay(reader, o, &future);
      EXPECT_LE(best.total.misses, r.total.misses + r.total.prefetch_issued);
      if (r.total.prefetch_issued == 0) {
        EXPECT_GE(best.total.hits, r.total.hits);
      }
    }
  }
}

TEST(SimBelady, NeverBeatenOnSkewedRandomTraces) {
  testing::TempDir dir;
  trace::TraceHeader h = ToyHeader();
  h.model.num_experts = 16;
  h.model.top_k = 2;
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    std::discrete_distribution<int32_t> popularity(
        {9, 7, 5, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1});
    std::vector<std::vector<int32_t>> gates;
    for (int i = 0; i < 300; ++i) {
      int32_t a = popularity(rng), b = popularity(rng);
      while (b == a) b = popularity(rng);
      gates.push_back({a, b});
    }
    const std::string path = dir / ("r" + std::to_string(seed) + ".trace");
    WriteSequence(path, h, gates);
    trace::TraceReader reader(path);
    ExpectBeladyBoundsAll(reader, {"lru", "lfu", "random"});
    ExpectBeladyBoundsAll(reader, {"reuse", "cycle-lru"}, /*admission=*/true);
  }
}

TEST(SimBelady, NeverBeatenOnRecordedTraces) {
  testing::TempDir dir;
  auto model = LoadModel(testing::TinyModelPath(Arch::kOlmoe));
  RecordRun(*model, dir / "run.trace", trace::Precision::kNone);
  trace::TraceReader reader(dir / "run.trace");
  ExpectBeladyBoundsAll(reader, {"lru", "lfu", "random", "nextgate", "nextgate+lfu"});
  ExpectBeladyBoundsAll(reader, {"reuse", "nextgate+reuse", "cycle-lru"}, /*admission=*/true);
}

TEST(SimErrors, PoliciesThatCannotRunSayWhy) {
  testing::TempDir dir;
  WriteSequence(dir / "toy.trace", ToyHeader(), {{0}, {1}});
  trace::TraceReader reader(dir / "toy.trace");
  sim::ReplayOptions o;
  o.hardware = TestHardware();
  o.policy.spec = "nextgate";
  try {
    sim::Replay(reader, o);
    ADD_FAILURE() << "nextgate ran without hidden states";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--hidden"), std::string::npos) << e.what();
  }
  o.policy.spec = "belady";  // Without the future.
  EXPECT_THROW(sim::Replay(reader, o), Error);
  o.policy.spec = "lru";
  o.budget = "lots";
  EXPECT_THROW(sim::Replay(reader, o), Error);
  o.budget = "25%";
  o.scale_to = sim::LoadScaleTarget("mixtral:full");  // 8 experts, the trace has 4.
  EXPECT_THROW(sim::Replay(reader, o), Error);
  EXPECT_THROW(sim::LoadScaleTarget("olmoe:huge"), Error);
  EXPECT_THROW(sim::LoadHardwareProfile("abacus"), Error);

  policy::PolicyFacts facts;
  facts.num_layers = 1;
  facts.moe_layer = {1};
  facts.num_experts = 4;
  try {
    policy::MakePolicy("belady", facts);
    ADD_FAILURE() << "belady ran in the engine";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moex sim"), std::string::npos) << e.what();
  }
}

// 1 GB/s: a 1 MB transfer takes 1 ms. Demand beats queued prefetches; the transfer in
// flight is never preempted; released transfers never land; promotion keeps order.
TEST(SimLinkModel, HandComputedQueue) {
  sim::LinkModel link(1.0, 0.0);
  const int64_t mb = 1000000;
  link.Enqueue({0, 1}, 0, 1, mb, false, 1.0, 0.0);  // Starts at once: 0 -> 1 ms.
  link.Enqueue({0, 2}, 1, 1, mb, false, 2.0, 0.0);  // Higher-priority prefetch.
  link.Enqueue({0, 3}, 2, 1, mb, true, 0.0, 0.0);   // Demand.
  link.Enqueue({0, 4}, 3, 1, mb, false, 0.5, 0.0);
  EXPECT_DOUBLE_EQ(link.NextCompletion(), 1.0);
  link.AdvanceTo(1.0);
  EXPECT_TRUE(link.Landed(0, 1));
  EXPECT_FALSE(link.Landed(2, 1));
  EXPECT_DOUBLE_EQ(link.NextCompletion(), 2.0);  // The demand went next.
  link.Release(3, 1.5);                          // Expert 4 leaves before it started.
  link.Promote({0, 2}, 1.5);
  link.AdvanceTo(2.0);
  EXPECT_TRUE(link.Landed(2, 1));
  link.AdvanceTo(10.0);
  EXPECT_TRUE(link.Landed(1, 1));
  EXPECT_FALSE(link.Landed(3, 1));
  EXPECT_EQ(link.bytes_moved(), 3 * mb);
  EXPECT_EQ(link.demand_bytes(), 2 * mb);  // The demand, and the promoted prefetch.
  EXPECT_EQ(link.dropped(), 1);
  EXPECT_DOUBLE_EQ(link.busy_ms(), 3.0);
  EXPECT_EQ(link.NextCompletion(), std::numeric_limits<double>::infinity());
}

TEST(SimHardwareProfile, LinkInFlightRoundTripsAndIsChecked) {
  nlohmann::json j = sim::ProfileToJson(sim::LoadHardwareProfile("rtx4090"));
  EXPECT_EQ(j.at("link_in_flight").get<int>(), 1);  // Serial unless a profile says otherwise.
  j["link_in_flight"] = 32;
  EXPECT_EQ(sim::ProfileFromJson(j).link_in_flight, 32);
  j.erase("link_in_flight");  // Profiles written before the field: a serial link.
  EXPECT_EQ(sim::ProfileFromJson(j).link_in_flight, 1);
  for (double bad : {0.0, 2.5, 1e9}) {
    j["link_in_flight"] = bad;
    EXPECT_THROW(sim::ProfileFromJson(j), Error) << bad;
  }
}

// 1 GB/s, five transfers in flight (three of them prefetches at most, as the engine's 3/4):
// submitted transfers keep their bytes when their page is released, a demand waits for what
// was submitted before it, and a page's next read waits for the read still in flight.
TEST(SimLinkModel, HandComputedInFlightWindow) {
  sim::LinkModel link(1.0, 0.0, 5);
  const int64_t mb = 1000000;
  for (int32_t page = 0; page < 4; ++page)  // A B C submitted (0-1, 1-2, 2-3 ms); D queued.
    link.Enqueue({0, page}, page, 1, mb, false, 1.0, 0.0);
  link.Enqueue({0, 4}, 4, 1, mb, true, 0.0, 0.5);  // Demand E: behind A B C, 3-4 ms.
  link.Release(1, 0.5);                            // B is in flight: it still moves.
  link.Release(3, 0.5);                            // D is queued: dropped.
  link.Enqueue({0, 9}, 1, 2, mb, true, 0.0, 0.5);  // F on B's page waits for B to finish.
  EXPECT_DOUBLE_EQ(link.NextCompletion(), 1.0);
  link.AdvanceTo(2.0);  // A lands, B completes at 2, F is submitted then and runs 4-5 ms.
  EXPECT_TRUE(link.Landed(0, 1));
  EXPECT_FALSE(link.Landed(1, 2));
  link.AdvanceTo(3.5);
  EXPECT_TRUE(link.Landed(2, 1));
  EXPECT_FALSE(link.Landed(4, 1));
  link.AdvanceTo(4.0);
  EXPECT_TRUE(link.Landed(4, 1));
  EXPECT_FALSE(link.Landed(1, 2));
  EXPECT_DOUBLE_EQ(link.NextCompletion(), 5.0);
  link.AdvanceTo(5.0);
  EXPECT_TRUE(link.Landed(1, 2));
  EXPECT_FALSE(link.Landed(3, 1));
  EXPECT_EQ(link.bytes_moved(), 5 * mb);
  EXPECT_EQ(link.demand_bytes(), 2 * mb);
  EXPECT_EQ(link.orphan_bytes(), mb);
  EXPECT_EQ(link.dropped(), 1);
  EXPECT_DOUBLE_EQ(link.busy_ms(), 5.0);
}

// d 1024, expert width 512, BF16: 3 * 1024 * 512 = 1,572,864 parameters, 3,145,728 bytes.
// At 10 GB/s streaming takes 0.3145728 ms; at 1 TFLOP/s one token's 3,145,728 flops take
// 0.0031457 ms and 1000 tokens' 3.1457 ms: decode is memory-bound, prefill compute-bound.
TEST(SimCostModel, HandComputedExpertTimes) {
  ModelConfig c;
  c.hidden_size = 1024;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 512;
  c.num_layers = 1;
  const sim::CostModel cost(TestHardware(), c, 2.0, 4.0);
  EXPECT_NEAR(cost.ExpertMs(1, 512), 0.3145728, 1e-9);
  EXPECT_NEAR(cost.ExpertMs(1000, 512), 3.145728, 1e-9);
  EXPECT_NEAR(cost.ExpertMs(1, 256), 0.3145728 / 2, 1e-9);
}

}  // namespace
}  // namespace moex

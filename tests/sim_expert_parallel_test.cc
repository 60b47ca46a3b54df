// The simulator's model of expert parallelism (layout A, docs/expert-parallel.md): the
// network cost of a layer by hand, per-rank tier stacks whose policies see only their own
// experts, one rank (or every expert on rank 0) giving the one-process replay exactly, and
// bad placements and network links refused with clear errors.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/expert_placement.h"
#include "engine/generator.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "sim/cost_model.h"
#include "sim/hardware_profile.h"
#include "sim/layer_exchange.h"
#include "sim/network_link.h"
#include "sim/replay.h"
#include "support/run_command.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"
#include "trace/trace_reader.h"
#include "trace/trace_recorder.h"

namespace moex {
namespace {

dist::ExpertPlacement OneLayerPlacement(int ranks, const std::vector<int>& rank_of_expert) {
  return dist::ExpertPlacement::FromJson(
      {{"ranks", ranks}, {"layers", {{{"layer", 0}, {"rank_of_expert", rank_of_expert}}}}});
}

// 2 ranks, experts 1 and 3 on rank 1, rows of 32 bytes, 1 MB/s and 10 us per round.
// Token 0 routes {0, 1}: one input row to rank 1, one output row back (expert 1).
// Token 1 routes {1, 3}: one input row to rank 1 (both experts there), two output rows.
// Scatter: 2 rows = 64 B: 0.010 + 64 / 1e6 s = 0.074 ms. Gather: 3 rows = 96 B: 0.106 ms.
TEST(SimLayerExchange, HandComputedTwoRanksTwoTokens) {
  const dist::ExpertPlacement p = OneLayerPlacement(2, {0, 1, 0, 1});
  const std::vector<int32_t> ids = {0, 1, 1, 3};
  const sim::LayerExchange x = sim::ExchangeOf(ids, 2, 2, 0, p, 32, 0.001, 10);
  EXPECT_EQ(x.input_rows, 2);
  EXPECT_EQ(x.output_rows, 3);
  EXPECT_EQ(x.bytes_sent, 64);
  EXPECT_EQ(x.bytes_received, 96);
  EXPECT_EQ(x.bytes_to, (std::vector<int64_t>{0, 64}));
  EXPECT_EQ(x.bytes_from, (std::vector<int64_t>{0, 96}));
  EXPECT_DOUBLE_EQ(x.scatter_ms, 0.074);
  EXPECT_DOUBLE_EQ(x.gather_ms, 0.106);
  EXPECT_DOUBLE_EQ(x.ms(), 0.180);
}

// 3 ranks: a token on ranks 1 and 2 sends two input rows; a token whose experts are all on
// rank 0 sends nothing; a layer with nothing remote costs no message round at all.
TEST(SimLayerExchange, HandComputedThreeRanksAndLocalLayers) {
  const dist::ExpertPlacement p = OneLayerPlacement(3, {0, 1, 2, 0});
  const std::vector<int32_t> ids = {1, 2, 0, 3};
  const sim::LayerExchange x = sim::ExchangeOf(ids, 2, 2, 0, p, 100, 1, 5);
  EXPECT_EQ(x.input_rows, 2);
  EXPECT_EQ(x.output_rows, 2);
  EXPECT_EQ(x.bytes_to, (std::vector<int64_t>{0, 100, 100}));
  // 0.005 ms + 200 B / 1 GB/s (0.0002 ms).
  EXPECT_DOUBLE_EQ(x.scatter_ms, 0.0052);
  EXPECT_DOUBLE_EQ(x.gather_ms, 0.0052);
  const std::vector<int32_t> local = {0, 3};
  const sim::LayerExchange none = sim::ExchangeOf(local, 1, 2, 0, p, 100, 1, 5);
  EXPECT_EQ(none.bytes_sent + none.bytes_received, 0);
  EXPECT_EQ(none.ms(), 0);
  EXPECT_THROW(sim::ExchangeOf(local, 2, 2, 0, p, 100, 1, 5), Error);  // 2 ids, 2 tokens.
}

// One MoE layer (layer 0 of 1) of 4 experts, experts of one 4 KiB page (4 neurons x 1 KiB).
trace::TraceHeader ToyHeader(int top_k) {
  trace::TraceHeader h;
  h.source = "test";
  h.model.name = "toy";
  h.model.num_layers = 1;
  h.model.moe_layers = {0};
  h.model.num_experts = 4;
  h.model.top_k = top_k;
  h.model.hidden_size = 8;
  h.model.expert_neurons = 4;
  h.model.record_bytes = 1024;
  h.model.block_neurons = 4;
  h.model.dtype = "bf16";
  return h;
}

// One request: a prompt of `passes[0].size() / top_k` tokens in one pass, then one token
// per pass; each pass's routing is its tokens' rows of top_k ids.
void WritePasses(const std::string& path, const trace::TraceHeader& h,
                 const std::vector<std::vector<int32_t>>& passes) {
  const int k = h.model.top_k;
  trace::TraceWriter w(path, h);
  trace::TraceEvent begin;
  begin.kind = trace::TraceEvent::kRequestBegin;
  begin.prompt.assign(passes[0].size() / static_cast<size_t>(k), 1);
  w.Write(begin);
  for (size_t i = 0; i < passes.size(); ++i) {
    const int64_t n = static_cast<int64_t>(passes[i].size()) / k;
    trace::TraceEvent e;
    e.kind = trace::TraceEvent::kIteration;
    e.iteration.iteration = static_cast<int64_t>(i);
    e.iteration.requests = {0};
    e.iteration.token_counts = {n};
    e.iteration.tokens.assign(static_cast<size_t>(n), 1);
    trace::TraceGate g;
    g.layer = 0;
    g.n_tokens = n;
    g.top_k = k;
    g.ids = passes[i];
    g.weights.assign(passes[i].size(), 1.0f / static_cast<float>(k));
    e.iteration.gates.push_back(g);
    w.Write(e);
  }
  trace::TraceEvent end;
  end.kind = trace::TraceEvent::kRequestEnd;
  w.Write(end);
  w.Finish();
}

sim::HardwareProfile TestHardware() {
  sim::HardwareProfile hw;
  hw.name = "test";
  hw.compute_gb_per_s = 10;
  hw.compute_tflops = 1;
  hw.link_gb_per_s = 1;
  hw.op_overhead_us = 3;
  return sim::WithNetwork(hw, {"slow", "", "", 0.001, 10});
}

// Access string 0 1 0 1 2 0 (top-1), experts 0 and 2 on rank 0, 1 and 3 on rank 1.
// One process at 50 % holds two experts: 0m 1m 0h 1h 2m(evicts 0) 0m = 2 hits, 4 misses.
// Two ranks at 50 % each hold one expert of their own two. Rank 0's policy sees only the
// gates of its experts, 0 0 2 0: m h m(evicts 0) m = 1 hit, 3 misses, 2 evictions; rank 1's
// sees 1 1: m h. Had a rank's gate events carried the other rank's experts, it would count
// their demand as its own (6 misses of 6 on rank 0 with one page). Belady, whose future is
// filtered the same way, has no choice with one page and gives the same counts.
TEST(SimExpertParallel, EachRankHasItsOwnCacheAndPolicyOverItsOwnExperts) {
  testing::TempDir dir;
  WritePasses(dir / "t.trace", ToyHeader(1), {{0}, {1}, {0}, {1}, {2}, {0}});
  trace::TraceReader reader(dir / "t.trace");
  sim::ReplayOptions o;
  o.hardware = TestHardware();
  o.budget = "50%";
  const sim::ReplayResult one = sim::Replay(reader, o);
  EXPECT_EQ(one.capacity_experts, 2);
  EXPECT_EQ(one.total.hits, 2);
  EXPECT_EQ(one.total.misses, 4);
  EXPECT_EQ(one.total.evictions, 2);
  EXPECT_FALSE(one.expert_parallel.has_value());

  o.ranks = 2;
  o.placement = OneLayerPlacement(2, {0, 1, 0, 1});
  for (const char* policy : {"lru", "belady"}) {
    SCOPED_TRACE(policy);
    o.policy.spec = policy;
    const policy::FutureDemand future = sim::ReadFutureDemand(reader);
    const sim::ReplayResult two = sim::Replay(reader, o, &future);
    ASSERT_TRUE(two.expert_parallel.has_value());
    const std::vector<sim::RankReplay>& ranks = two.expert_parallel->per_rank;
    ASSERT_EQ(ranks.size(), 2u);
    EXPECT_EQ(ranks[0].experts, 2);
    EXPECT_EQ(ranks[0].capacity_experts, 1);
    EXPECT_EQ(ranks[0].budget_bytes, 4096);
    EXPECT_EQ(ranks[0].total.hits, 1);
    EXPECT_EQ(ranks[0].total.misses, 3);
    EXPECT_EQ(ranks[0].total.evictions, 2);
    EXPECT_EQ(ranks[1].total.hits, 1);
    EXPECT_EQ(ranks[1].total.misses, 1);
    EXPECT_EQ(ranks[0].total.prefetch_foreign + ranks[1].total.prefetch_foreign, 0);
    EXPECT_EQ(two.total.hits, 2);
    EXPECT_EQ(two.total.misses, 4);
    EXPECT_EQ(two.capacity_experts, 2);
    EXPECT_EQ(two.budget_bytes, one.budget_bytes);
    // Each rank read its own misses: 3 and 1 experts of 4 KiB.
    EXPECT_EQ(ranks[0].bytes_read, 3 * 4096);
    EXPECT_EQ(ranks[1].bytes_read, 1 * 4096);
  }
  // A byte budget is per rank: 4096 each holds one expert on each rank.
  o.policy.spec = "lru";
  o.budget = "4096";
  const sim::ReplayResult bytes = sim::Replay(reader, o);
  EXPECT_EQ(bytes.expert_parallel->per_rank[0].capacity_experts, 1);
  EXPECT_EQ(bytes.expert_parallel->per_rank[1].capacity_experts, 1);
  EXPECT_EQ(bytes.budget_bytes, 8192);
  // Without a placement, experts are balanced by the trace's routing: two per rank, the two
  // hottest (0 and 1, three and two routed tokens) on different ranks.
  o.placement.reset();
  const sim::ReplayResult balanced = sim::Replay(reader, o);
  EXPECT_EQ(balanced.expert_parallel->per_rank[0].experts, 2);
  EXPECT_EQ(balanced.expert_parallel->per_rank[1].experts, 2);
  const auto& rank_of = balanced.expert_parallel->placement["layers"][0]["rank_of_expert"];
  EXPECT_NE(rank_of[0], rank_of[1]);
}

// A timed replay of the toy over 2 ranks (top-2, experts 1 and 3 on rank 1, rows of
// 4 x 8 = 32 bytes, 1 MB/s and 10 us per round):
//   pass 0, prompt of 2 tokens {0,1} {1,3}: 2 input rows, 3 output rows: 0.074 + 0.106 ms;
//   pass 1, one decode token {2,3}: 1 input row, 1 output row: 0.042 + 0.042 ms.
// The pass time is rank 0's own work, each layer's slowest expert phase and the exchange.
TEST(SimExpertParallel, HandComputedNetworkCostOfAReplay) {
  testing::TempDir dir;
  const trace::TraceHeader h = ToyHeader(2);
  WritePasses(dir / "t.trace", h, {{0, 1, 1, 3}, {2, 3}});
  trace::TraceReader reader(dir / "t.trace");
  ModelConfig config = sim::TraceConfig(h);  // Costed as itself, with a head and attention.
  config.num_heads = 1;
  config.num_kv_heads = 1;
  config.head_dim = 8;
  config.vocab_size = 16;
  sim::ReplayOptions o;
  o.hardware = TestHardware();
  o.hardware.link_gb_per_s = 1e6;  // Storage all but free: the slower rank is the busier one.
  o.budget = "100%";
  o.scale_to = config;
  o.ranks = 2;
  o.placement = OneLayerPlacement(2, {0, 1, 0, 1});
  const sim::ReplayResult r = sim::Replay(reader, o);
  ASSERT_TRUE(r.timed);
  ASSERT_TRUE(r.expert_parallel.has_value());
  const sim::ExpertParallelResult& x = *r.expert_parallel;
  EXPECT_EQ(x.input_rows, 3);
  EXPECT_EQ(x.output_rows, 4);
  EXPECT_EQ(x.bytes_sent, 96);
  EXPECT_EQ(x.bytes_received, 128);
  EXPECT_EQ(x.decode_network_bytes, 64);
  EXPECT_NEAR(x.network_ms, 0.074 + 0.106 + 0.042 + 0.042, 1e-12);
  EXPECT_NEAR(x.decode_network_ms, 0.084, 1e-12);
  EXPECT_EQ(x.per_rank[0].network_bytes_in + x.per_rank[0].network_bytes_out, 0);
  EXPECT_EQ(x.per_rank[1].network_bytes_in, 96);
  EXPECT_EQ(x.per_rank[1].network_bytes_out, 128);
  const nlohmann::json j = r.ToJson();
  EXPECT_DOUBLE_EQ(j["expert_parallel"]["network_bytes_per_token"].get<double>(), 224.0 / 3);
  EXPECT_DOUBLE_EQ(j["expert_parallel"]["decode_network_bytes_per_token"].get<double>(), 64);

  // Expert compute, from the cost model: (overhead + expert over its tokens) per expert.
  const sim::CostModel cost(o.hardware, config, 2.0, 4.0);
  auto expert = [&](int64_t tokens) { return cost.ExpertOverheadMs() + cost.ExpertMs(tokens, 4); };
  const double rank0 = expert(1) + expert(1);              // Expert 0, then expert 2.
  const double rank1 = expert(2) + expert(1) + expert(1);  // Experts 1 and 3, then 3.
  EXPECT_NEAR(x.per_rank[0].expert_compute_ms, rank0, 1e-12);
  EXPECT_NEAR(x.per_rank[1].expert_compute_ms, rank1, 1e-12);
  // Pass 0's slowest rank is rank 1 (two experts); pass 1's ranks do equal work.
  EXPECT_NEAR(x.expert_compute_ms + x.expert_stall_ms, expert(2) + expert(1) + expert(1), 1e-9);
  EXPECT_NEAR(x.decode_expert_compute_ms + r.decode_stall_ms, expert(1), 1e-9);  // Pass 1.
  EXPECT_NEAR(r.total_ms, x.rank0_other_ms + x.expert_compute_ms + x.expert_stall_ms + x.network_ms,
              1e-12);
  EXPECT_GT(x.rank0_other_ms, 0);
  // The same replay in one process pays no network and runs every expert on one rank.
  o.ranks = 1;
  o.placement.reset();
  const sim::ReplayResult one = sim::Replay(reader, o);
  EXPECT_NEAR(
      r.total_ms - one.total_ms,
      x.network_ms - (rank0 + rank1 - x.expert_compute_ms) + (x.expert_stall_ms - one.stall_ms),
      1e-9);
}

// Records a batch of three requests of a tiny model with gate inputs and routers.
void RecordTiny(const Model& model, const std::string& path) {
  ResidentMoeExecutor resident(model);
  Transformer t(model, resident);
  trace::TraceHeader h;
  h.source = "test";
  h.model = trace::TraceModelOf(model);
  h.hidden = trace::Precision::kF32;
  h.router_weights = true;
  trace::TraceWriter writer(path, h);
  trace::TraceRecorder recorder(writer, model);
  t.AddSink(&recorder);
  GenerationRequest a, b, c;
  a.prompt = {5, 9, 200, 31, 7, 64, 12, 90};
  a.max_tokens = 10;
  b.prompt = {77, 3};
  b.max_tokens = 6;
  c.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  c.max_tokens = 8;
  Generator g(t);
  g.Generate({a, b});
  g.Generate({c});
  writer.Finish();
}

// The expert-parallel path reduces exactly to the one-process replay when rank 0 owns every
// expert: the same hits, bytes and modelled times, field for field of the JSON report (the
// policy's measured CPU aside; the storage stall, summed per layer instead of per wait, to
// the last bits). And one rank's report carries nothing new.
TEST(SimExpertParallel, EveryExpertOnRankZeroIsTheOneProcessReplay) {
  testing::TempDir dir;
  auto model = LoadModel(testing::TinyModelPath(Arch::kOlmoe));
  RecordTiny(*model, dir / "run.trace");
  trace::TraceReader reader(dir / "run.trace");
  const trace::TraceModel& m = reader.header().model;
  nlohmann::json layers = nlohmann::json::array();
  for (int l : m.moe_layers)
    layers.push_back({{"layer", l}, {"rank_of_expert", std::vector<int>(m.num_experts, 0)}});
  for (const char* policy : {"lru", "lfu", "nextgate+lru"}) {
    for (const char* budget : {"10%", "50%"}) {
      SCOPED_TRACE(std::string(policy) + " at " + budget);
      sim::ReplayOptions o;
      o.hardware = TestHardware();
      o.policy.spec = policy;
      o.policy.worker = policy::PolicyWorker::Mode::kSync;
      o.budget = budget;
      const sim::ReplayResult one = sim::Replay(reader, o);
      ASSERT_TRUE(one.timed);
      nlohmann::json a = one.ToJson();
      EXPECT_FALSE(a.contains("expert_parallel"));
      o.ranks = 3;
      o.placement = dist::ExpertPlacement::FromJson({{"ranks", 3}, {"layers", layers}});
      const sim::ReplayResult three = sim::Replay(reader, o);
      nlohmann::json b = three.ToJson();
      ASSERT_TRUE(b.contains("expert_parallel"));
      EXPECT_EQ(b["expert_parallel"]["network_bytes_sent"], 0);
      EXPECT_EQ(b["expert_parallel"]["per_rank"][1]["hits"], 0);
      b.erase("expert_parallel");
      for (nlohmann::json* j : {&a, &b}) j->erase("policy_cpu");
      for (const char* key : {"stall_ms", "decode_stall_ms_per_token", "io_hidden_share"}) {
        EXPECT_NEAR(a["modelled"][key].get<double>(), b["modelled"][key].get<double>(),
                    1e-9 * (1 + std::abs(a["modelled"][key].get<double>())))
            << key;
        a["modelled"].erase(key);
        b["modelled"].erase(key);
      }
      EXPECT_EQ(a, b);
      EXPECT_GT(one.total.hits + one.total.misses, 0);
    }
  }
}

TEST(SimExpertParallel, BadPlacementsAndLinksAreRefusedClearly) {
  testing::TempDir dir;
  WritePasses(dir / "t.trace", ToyHeader(1), {{0}, {1}});
  trace::TraceReader reader(dir / "t.trace");
  sim::ReplayOptions o;
  o.hardware = TestHardware();
  auto error_of = [&](const sim::ReplayOptions& options) {
    try {
      sim::Replay(reader, options);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  o.ranks = 2;
  o.placement = OneLayerPlacement(3, {0, 1, 2, 0});
  EXPECT_NE(error_of(o).find("placement is for 3 ranks, but the run has 2"), std::string::npos)
      << error_of(o);
  o.placement = OneLayerPlacement(2, {0, 1, 1});
  EXPECT_NE(error_of(o).find("gives 3 experts of layer 0 a rank; the model has 4"),
            std::string::npos)
      << error_of(o);
  o.placement =
      dist::ExpertPlacement::FromJson({{"ranks", 2},
                                       {"layers",
                                        {{{"layer", 0}, {"rank_of_expert", {0, 1, 0, 1}}},
                                         {{"layer", 1}, {"rank_of_expert", {0, 1, 0, 1}}}}}});
  EXPECT_NE(error_of(o).find("lists layer 1, but the model has 1 layers"), std::string::npos)
      << error_of(o);
  o.placement.reset();
  o.ranks = 1;
  o.placement = OneLayerPlacement(2, {0, 1, 0, 1});  // A placement must fit the run's ranks.
  EXPECT_NE(error_of(o).find("for 2 ranks, but the run has 1"), std::string::npos);
  o.placement.reset();
  o.ranks = 0;
  EXPECT_NE(error_of(o).find("at least 1"), std::string::npos) << error_of(o);
  o.ranks = 2;
  o.hardware.network_gb_per_s = 0;
  EXPECT_NE(error_of(o).find("needs a network link"), std::string::npos) << error_of(o);

  EXPECT_THROW(sim::LoadNetworkLink("token-ring"), Error);
  try {
    sim::LoadNetworkLink("token-ring");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("25gbe"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sim::NetworkLinkFromJson({{"gb_per_s", 0}, {"latency_us", 1}}), Error);
  EXPECT_THROW(sim::NetworkLinkFromJson({{"gb_per_s", 1}, {"latency_us", -1}}), Error);
  EXPECT_THROW(sim::NetworkLinkFromJson({{"gb_per_s", 1}}), Error);
}

// The built-in links load by name and round-trip through JSON; a compute profile carries
// no link until one is chosen, so one process's report is unchanged; a profile's own link
// round-trips, and half a link is refused.
TEST(SimNetworkLink, BuiltinsProfilesAndFiles) {
  for (const sim::NetworkLink& link : sim::BuiltinNetworkLinks()) {
    SCOPED_TRACE(link.name);
    EXPECT_GT(link.gb_per_s, 0);
    EXPECT_GE(link.latency_us, 0);
    EXPECT_FALSE(link.source.empty());
    const sim::NetworkLink back = sim::NetworkLinkFromJson(sim::NetworkLinkToJson(link));
    EXPECT_EQ(back.gb_per_s, link.gb_per_s);
    EXPECT_EQ(back.latency_us, link.latency_us);
    EXPECT_EQ(sim::LoadNetworkLink(link.name).gb_per_s, link.gb_per_s);
  }
  for (const sim::HardwareProfile& p : sim::BuiltinProfiles())
    EXPECT_FALSE(sim::ProfileToJson(p).contains("network_gb_per_s")) << p.name;
  const sim::HardwareProfile with =
      sim::WithNetwork(sim::LoadHardwareProfile("rtx4090"), sim::LoadNetworkLink("25gbe"));
  const nlohmann::json j = sim::ProfileToJson(with);
  EXPECT_EQ(j["network"], "25gbe");
  EXPECT_EQ(j["network_gb_per_s"], 3.1);
  const sim::HardwareProfile back = sim::ProfileFromJson(j);
  EXPECT_EQ(back.network, "25gbe");
  EXPECT_EQ(back.network_gb_per_s, 3.1);
  EXPECT_EQ(back.network_latency_us, 30);
  nlohmann::json half = j;
  half.erase("network_gb_per_s");
  EXPECT_THROW(sim::ProfileFromJson(half), Error);

  testing::TempDir dir;
  std::ofstream(dir / "link.json") << R"({"name": "lab", "gb_per_s": 2.5, "latency_us": 12})";
  const sim::NetworkLink lab = sim::LoadNetworkLink(dir / "link.json");
  EXPECT_EQ(lab.name, "lab");
  EXPECT_EQ(lab.gb_per_s, 2.5);
  EXPECT_EQ(lab.latency_us, 12);
  std::ofstream(dir / "bad.json") << "{";
  EXPECT_THROW(sim::LoadNetworkLink(dir / "bad.json"), Error);
}

// `moex sim --ranks` end to end on a demo trace: the report's time split adds up to the
// modelled total, the text names the ranks and the link, and bad flags give clear errors.
TEST(SimExpertParallelCli, RanksNetworkAndPlacementFlags) {
  using testing::Moex;
  using testing::RunCommand;
  testing::TempDir dir;
  const std::string trace =
      (testing::SourceDir() / "models/olmoe-demo/traces/mtbench.trace").string();
  const std::string sim = "sim --trace " + trace + " --budget 25% ";
  const auto json = RunCommand(Moex(sim + "--ranks 2 --network loopback --json"));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  const auto& x = j["expert_parallel"];
  EXPECT_EQ(x["ranks"], 2);
  EXPECT_EQ(x["network"], "loopback");
  EXPECT_EQ(x["per_rank"].size(), 2u);
  EXPECT_EQ(j["hardware"]["network"], "loopback");
  double sum = 0;
  for (const auto& [key, ms] : x["time_ms"].items()) sum += ms.get<double>();
  EXPECT_NEAR(sum, j["modelled"]["total_ms"].get<double>(),
              1e-9 * j["modelled"]["total_ms"].get<double>());
  EXPECT_GT(x["network_bytes_per_token"].get<double>(), 0);
  EXPECT_EQ(x["per_rank"][0]["hits"].get<int64_t>() + x["per_rank"][1]["hits"].get<int64_t>(),
            j["hits"].get<int64_t>());

  // The placement the report prints is one --placement takes back, with the same result.
  std::ofstream(dir / "placement.json") << x["placement"].dump();
  const auto again = RunCommand(
      Moex(sim + "--ranks 2 --network loopback --json --placement " + (dir / "placement.json")));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["hits"], j["hits"]);

  const auto text = RunCommand(Moex(sim + "--ranks 2 --network 25gbe"));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("2 ranks on 25gbe"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("network:"), std::string::npos) << text.out;

  auto error_of = [&](const std::string& flags) {
    const auto r = RunCommand(Moex(sim + flags));
    EXPECT_NE(r.exit_code, 0) << flags;
    return r.err;
  };
  EXPECT_NE(error_of("--ranks 2").find("needs a network link"), std::string::npos);
  EXPECT_NE(error_of("--ranks 2 --network token-ring").find("built-in: loopback"),
            std::string::npos);
  std::ofstream(dir / "three.json") << R"({"ranks": 3, "layers": []})";
  EXPECT_NE(error_of("--ranks 2 --network 10gbe --placement " + (dir / "three.json"))
                .find("placement is for 3 ranks, but the run has 2"),
            std::string::npos);
  EXPECT_NE(error_of("--ranks 2 --network 10gbe --policy-state " + (dir / "s.state"))
                .find("--policy-state saves one policy"),
            std::string::npos);
  EXPECT_NE(error_of("--ranks 0").find("--ranks"), std::string::npos);
}

}  // namespace
}  // namespace moex

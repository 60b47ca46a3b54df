// Expert parallelism end to end: `moex` under `mpirun -np 2` and `-np 3` on this host
// (TCP over loopback) gives the logits and tokens of one process bit for bit, for every
// architecture, resident and offloaded; each rank holds only its share of the experts, and
// when offloaded its own stack counts what the simulator's rank counts; a placement that does not
// fit, ranks that opened different models, a rank that dies and a rank that stops answering
// all end with an error naming the cause, never a hang.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/external_tools.h"
#include "support/run_command.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

using testing::Moex;
using testing::MoexBinary;
using testing::RunCommand;

// mpirun on this host only: TCP over loopback between the ranks (as between hosts), more
// ranks than cores allowed, no pinning (the ranks share two cores), root allowed (CI runs
// as root), and every run bounded so that a hang fails instead of blocking the suite.
std::string MpiRun(const std::string& ranks_and_args, int limit_s = 240) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
         "OMPI_MCA_rmaps_base_oversubscribe=1 "
         "timeout " +
         std::to_string(limit_s) +
         " mpirun --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo "
         "--mca oob_tcp_if_include lo " +
         ranks_and_args;
}
std::string MpiMoex(int ranks, const std::string& args) {
  return MpiRun("-np " + std::to_string(ranks) + " " + MoexBinary() + " " + args);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

constexpr const char* kPrompt = "--prompt-ids 1,5,9,2,7,3,8,4,6,10,11,12";

class ExpertParallelTest : public ::testing::TestWithParam<Arch> {};

TEST_P(ExpertParallelTest, LogitsEqualOneProcessResidentAndOffloaded) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("mpirun"));
  const std::string model = testing::TinyModelPath(GetParam());
  testing::TempDir dir;
  const auto one =
      RunCommand(Moex("logits -m " + model + " -t 1 " + kPrompt + " --out " + (dir / "one")));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const std::string want = ReadBytes(dir / "one");
  ASSERT_FALSE(want.empty());
  for (int ranks : {2, 3}) {
    const std::string out = dir / ("ep" + std::to_string(ranks));
    const auto ep = RunCommand(MpiMoex(
        ranks, "logits -m " + model + " -t 1 " + kPrompt + " --expert-parallel --out " + out));
    ASSERT_EQ(ep.exit_code, 0) << ranks << " ranks:\n" << ep.out << ep.err;
    EXPECT_TRUE(ReadBytes(out) == want) << ranks << " ranks: the logits differ from one process";
  }
  // Each rank offloading its own experts through its own store, a quarter of them cached,
  // with a policy that predicts from the relayed gate inputs.
  for (int ranks : {2, 3}) {
    const std::string out = dir / ("offloaded" + std::to_string(ranks));
    const auto ep = RunCommand(MpiMoex(ranks, "logits -m " + model + " -t 1 " + kPrompt +
                                                  " --expert-parallel --host-budget 25% "
                                                  "--policy nextgate+lfu --store " +
                                                  (dir / "experts.moex") + " --out " + out));
    ASSERT_EQ(ep.exit_code, 0) << ranks << " ranks offloaded:\n" << ep.out << ep.err;
    EXPECT_TRUE(ReadBytes(out) == want)
        << ranks << " ranks offloaded: the logits differ from one process";
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ExpertParallelTest,
                         ::testing::Values(Arch::kOlmoe, Arch::kQwen2Moe, Arch::kQwen3Moe,
                                           Arch::kMixtral, Arch::kDeepseekMoe, Arch::kPhiMoe,
                                           Arch::kDeepseekV2, Arch::kDeepseekV3, Arch::kGlm4Moe,
                                           Arch::kGptOss, Arch::kMiniMaxM2, Arch::kQwen3Next,
                                           Arch::kQwen35Moe, Arch::kLlama4),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

// Decoding token by token (one row per layer message) and a block-quantized model: the same
// tokens as one process; each rank reports its share of the experts and of the traffic.
TEST(ExpertParallel, GreedyDecodeOfAQuantizedModelEqualsOneProcess) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("mpirun"));
  const std::string model = testing::TinyQuantModelPath(DType::kQ8_0);
  const std::string args = "generate -m " + model +
                           " -t 1 --prompt-ids 1,2,3,4 --max-tokens 16 "
                           "--ignore-eos --temperature 0 --json";
  const auto one = RunCommand(Moex(args));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto ep = RunCommand(MpiMoex(2, args + " --expert-parallel"));
  ASSERT_EQ(ep.exit_code, 0) << ep.out << ep.err;
  const auto a = nlohmann::json::parse(one.out), b = nlohmann::json::parse(ep.out);
  EXPECT_EQ(b["tokens"], a["tokens"]);
  const nlohmann::json& info = b["offload"]["expert_parallel"];
  ASSERT_EQ(info["ranks"], 2) << b["offload"].dump();
  const nlohmann::json& r0 = info["per_rank"][0];
  const nlohmann::json& r1 = info["per_rank"][1];
  // Balanced without counts: every rank holds half the experts, and half the bytes.
  EXPECT_EQ(r0["experts"], r1["experts"]);
  EXPECT_EQ(r0["expert_bytes"], r1["expert_bytes"]);
  EXPECT_GT(r1["bytes_sent"].get<int64_t>(), 0);
  EXPECT_GT(r1["bytes_received"].get<int64_t>(), 0);
  EXPECT_GT(r1["rows_computed"].get<int64_t>(), 0);
  EXPECT_GT(r1["peak_rss_bytes"].get<int64_t>(), 0);
  // One process holds every expert: each rank's expert bytes are half of that.
  EXPECT_EQ(2 * r0["expert_bytes"].get<int64_t>(), a["memory"]["host_cache_bytes"].get<int64_t>());
}

TEST(ExpertParallel, APlacementFileIsFollowedAndOneThatDoesNotFitIsRefused) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("mpirun"));
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  testing::TempDir dir;
  // Every expert on rank 1 except expert 0 of each layer: rank 0 computes almost nothing.
  const auto config = nlohmann::json::parse(ReadBytes(model + "/config.json"));
  const int layers = config["num_hidden_layers"], experts = config["num_experts"];
  nlohmann::json placement = {{"ranks", 2}, {"layers", nlohmann::json::array()}};
  for (int l = 0; l < layers; ++l) {
    std::vector<int> row(static_cast<size_t>(experts), 1);
    row[0] = 0;
    placement["layers"].push_back({{"layer", l}, {"rank_of_expert", row}});
  }
  std::ofstream(dir / "p.json") << placement.dump();
  const auto one =
      RunCommand(Moex("logits -m " + model + " -t 1 " + kPrompt + " --out " + (dir / "one")));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto ep = RunCommand(MpiMoex(2, "logits -m " + model + " -t 1 " + kPrompt +
                                            " --expert-parallel --placement " + (dir / "p.json") +
                                            " --out " + (dir / "ep")));
  ASSERT_EQ(ep.exit_code, 0) << ep.out << ep.err;
  EXPECT_TRUE(ReadBytes(dir / "ep") == ReadBytes(dir / "one"));
  // The same file on three ranks: refused on every rank, with the reason.
  const auto three = RunCommand(MpiMoex(3, "logits -m " + model + " -t 1 " + kPrompt +
                                               " --expert-parallel --placement " +
                                               (dir / "p.json") + " --out " + (dir / "ep3")));
  EXPECT_NE(three.exit_code, 0);
  EXPECT_NE(three.err.find("placement is for 2 ranks, but the run has 3"), std::string::npos)
      << three.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "ep3"));
  // One layer short.
  placement["layers"].erase(placement["layers"].begin());
  std::ofstream(dir / "short.json") << placement.dump();
  const auto short_run = RunCommand(
      MpiMoex(2, "logits -m " + model + " -t 1 " + kPrompt + " --expert-parallel --placement " +
                     (dir / "short.json") + " --out " + (dir / "ep4")));
  EXPECT_NE(short_run.exit_code, 0);
  EXPECT_NE(short_run.err.find("gives 0 experts of layer 0 a rank"), std::string::npos)
      << short_run.err;
}

// --placement with a routing trace: the balanced placement of its counts; the same tokens.
TEST(ExpertParallel, APlacementBalancedByARecordedTraceGivesTheSameTokens) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("mpirun"));
  testing::TempDir dir;
  const std::string model = dir / "olmoe";  // With a tokenizer, for the text prompts.
  ASSERT_EQ(RunCommand(Moex("random-model --arch olmoe --size tiny --out " + model)).exit_code, 0);
  std::ofstream(dir / "prompts.txt") << "one\ntwo three\n";
  const auto rec =
      RunCommand(Moex("trace record --model " + model + " --prompts " + (dir / "prompts.txt") +
                      " --max-tokens 4 --out " + (dir / "r.trace")));
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  const std::string args = "generate -m " + model +
                           " -t 1 --prompt-ids 3,1,4,1,5 --max-tokens 8 "
                           "--ignore-eos --temperature 0 --json";
  const auto one = RunCommand(Moex(args));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto ep =
      RunCommand(MpiMoex(2, args + " --expert-parallel --placement " + (dir / "r.trace")));
  ASSERT_EQ(ep.exit_code, 0) << ep.out << ep.err;
  const auto a = nlohmann::json::parse(one.out), b = nlohmann::json::parse(ep.out);
  EXPECT_EQ(b["tokens"], a["tokens"]);
  EXPECT_NE(b["offload"]["expert_parallel"]["placement"].get<std::string>().find("routing of"),
            std::string::npos);
  // Neither a placement nor a trace: refused, naming the file.
  std::ofstream(dir / "junk") << "junk";
  const auto junk =
      RunCommand(MpiMoex(2, args + " --expert-parallel --placement " + (dir / "junk")));
  EXPECT_NE(junk.exit_code, 0);
  EXPECT_NE(junk.err.find("junk"), std::string::npos) << junk.err;
}

// Flags that do not combine are refused before anything runs, naming them (one process:
// MPI starts as a singleton for the second).
// Each rank offloads its own experts with its own store, budget and policy, fed the events
// of its own experts: its counters are the simulator's for that rank (`moex sim --ranks 2`
// over the trace of the same run, the same placement), for every kind of policy; a share
// budget is of the rank's own experts.
TEST(ExpertParallel, EachRanksOffloadCountersAreTheSimulatorsForThatRank) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("mpirun"));
  testing::TempDir dir;
  const std::string model = dir / "olmoe";  // With a tokenizer: prompt sets are text.
  const auto made = RunCommand(Moex("random-model --arch olmoe --out " + model));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::ofstream(dir / "prompts.txt") << "the cat sat on the mat\nhello world of experts\n"
                                        "another prompt here please\n";
  const std::string record = "trace record -m " + model + " -t 1 --prompts " +
                             (dir / "prompts.txt") + " --max-tokens 8 --json --force ";
  // The placement both use: balanced by a one-process recording's routing (the simulator's
  // default placement is balanced by its trace's, and the routing is the same).
  const auto one = RunCommand(Moex(record + "--out " + (dir / "one.trace")));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  for (const char* policy : {"lru", "nextgate+lfu", "fmoe", "moepic"}) {
    SCOPED_TRACE(policy);
    const std::string flags =
        std::string(" --host-budget 25% --policy ") + policy + " --policy-worker sync";
    const auto ep = RunCommand(
        MpiMoex(2, record + "--out " + (dir / "ep.trace") + " --hidden f32 --probs f32 --pooled " +
                       "--expert-parallel --placement " + (dir / "one.trace") + " --store " +
                       (dir / "experts.moex") + flags));
    ASSERT_EQ(ep.exit_code, 0) << ep.out << ep.err;
    const auto sim = RunCommand(Moex("sim --trace " + (dir / "ep.trace") +
                                     " --ranks 2 --network loopback --budget 25% --policy " +
                                     policy + " --policy-worker sync --json"));
    ASSERT_EQ(sim.exit_code, 0) << sim.err;
    const nlohmann::json engine =
        nlohmann::json::parse(ep.out)["offload"]["expert_parallel"]["per_rank"];
    nlohmann::json simulated = nlohmann::json::parse(sim.out);
    if (simulated.is_array()) simulated = simulated[0];
    const nlohmann::json& ranks = simulated["expert_parallel"]["per_rank"];
    ASSERT_EQ(engine.size(), 2u);
    ASSERT_EQ(ranks.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(engine[r]["experts"], ranks[r]["experts"]) << "rank " << r;
      EXPECT_EQ(engine[r]["hits"], ranks[r]["hits"]) << "rank " << r;
      EXPECT_EQ(engine[r]["misses"], ranks[r]["misses"]) << "rank " << r;
      EXPECT_GT(engine[r]["store_bytes_read"].get<int64_t>(), 0) << "rank " << r;
    }
    // Rank 0's budget is a quarter of its own experts' bytes: the simulator's for rank 0.
    EXPECT_EQ(nlohmann::json::parse(ep.out)["offload"]["budget_bytes"], ranks[0]["budget_bytes"]);
  }
}

TEST(ExpertParallel, FlagsThatDoNotCombineAreRefused) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("mpirun"));
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  testing::TempDir dir;
  const std::string base = "logits -m " + model + " " + kPrompt + " --out " + (dir / "x");
  const auto placement = RunCommand(Moex(base + " --placement p.json"));
  EXPECT_NE(placement.exit_code, 0);
  EXPECT_NE(placement.err.find("--placement needs --expert-parallel"), std::string::npos)
      << placement.err;
  const std::string mpi_env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
  const auto budget = RunCommand(mpi_env + Moex(base + " --expert-parallel --host-budget auto"));
  EXPECT_NE(budget.exit_code, 0);
  EXPECT_NE(budget.err.find("--host-budget auto does not combine with --expert-parallel"),
            std::string::npos)
      << budget.err;
  const auto learn = RunCommand(
      mpi_env + Moex(base + " --expert-parallel --host-budget 50% --learn-from x.trace"));
  EXPECT_NE(learn.exit_code, 0);
  EXPECT_NE(learn.err.find("--learn-from, --policy-state and --replay-routing do not combine "
                           "with --expert-parallel"),
            std::string::npos)
      << learn.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "x"));
}

TEST(ExpertParallel, RanksThatOpenedDifferentModelsAreRefused) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("mpirun"));
  const std::string a = testing::TinyModelPath(Arch::kOlmoe, DType::kBF16, 7);
  const std::string b = testing::TinyModelPath(Arch::kOlmoe, DType::kBF16, 8);
  testing::TempDir dir;
  const std::string rest =
      " -t 1 " + std::string(kPrompt) + " --expert-parallel --out " + (dir / "x");
  const auto r = RunCommand(MpiRun("-np 1 " + MoexBinary() + " logits -m " + a + rest +
                                   " : -np 1 " + MoexBinary() + " logits -m " + b + rest));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rank 1 opened a different model"), std::string::npos) << r.err;
}

// A worker whose store cannot be made (its --store directory is missing on its host) says
// why, and the run ends without output.
TEST(ExpertParallel, ARankThatCannotLoadItsExpertsEndsTheRunSayingWhy) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("mpirun"));
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  testing::TempDir dir;
  const std::string args = " logits -m " + model + " -t 1 " + kPrompt + " --out " + (dir / "x") +
                           " --expert-parallel --host-budget 25% --store ";
  const auto r = RunCommand(MpiRun("-np 1 " + MoexBinary() + args + (dir / "s") + " : -np 1 " +
                                   MoexBinary() + args + (dir / "missing/s")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rank 1 could not load its experts: cannot create lock file " +
                       (dir / "missing/s.lock")),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "x"));
}

// Starts `moex serve` on 2 ranks, waits until it answers, then does `action` (shell, with
// $RANK1 the worker's pid and $PORT the server's port); prints what curl and mpirun said.
testing::CommandResult ServeAndThen(const std::string& model, const std::string& serve_args,
                                    const std::string& action) {
  testing::TempDir dir;
  const std::string log = dir / "serve.log";
  const std::string script =
      MpiMoex(2, "serve -m " + model + " -t 1 --port 0 --expert-parallel " + serve_args) + " > " +
      log +
      " 2>&1 &\n"
      "MPIRUN=$!\n"
      "for i in $(seq 600); do grep -q 'serving .* at http' " +
      log +
      " && break; sleep 0.1; done\n"
      "PORT=$(sed -n 's/.*at http:\\/\\/[^:]*:\\([0-9]*\\).*/\\1/p' " +
      log +
      " | head -1)\n"
      "RANK1=''\n"
      "for p in $(pgrep -f '" +
      MoexBinary() + " serve -m " +
      model +  // This run's ranks only (ctest runs tests side by side).
      "'); do\n"
      "  if tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | "
      "grep -qx 'OMPI_COMM_WORLD_RANK=1'; then RANK1=$p; fi\n"
      "done\n"
      "echo \"port=$PORT rank1=$RANK1\"\n" +
      action + "\nwait $MPIRUN; echo \"mpirun=$?\"\ncat " + log + "\n";
  std::ofstream(dir / "run.sh") << script;
  return RunCommand("bash " + (dir / "run.sh"));
}

TEST(ExpertParallel, ARankThatDiesEndsTheRunNamingItInsteadOfHanging) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("mpirun"));
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const auto r = ServeAndThen(model, "", "kill -9 $RANK1");
  EXPECT_NE(r.out.find("rank1="), std::string::npos);
  EXPECT_EQ(r.out.find("rank1= "), std::string::npos) << "no worker found:\n" << r.out;
  EXPECT_EQ(r.out.find("mpirun=0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("mpirun=124"), std::string::npos) << "hung:\n" << r.out;
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
}

// The server answers on two ranks, each offloading its experts, and reports each rank on
// /metrics (network and store); when the worker stops answering, the request fails with an
// error naming it after --ep-timeout.
TEST(ExpertParallel, ServesWithPerRankMetricsAndARankThatStopsAnsweringFailsTheRequest) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("mpirun"));
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("curl"));
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  testing::TempDir dir;
  const auto r = ServeAndThen(
      model, "--ep-timeout 2 --host-budget 50% --store " + (dir / "experts.moex"),
      "curl -s -m 60 http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' "
      "-d '{\"prompt\": [1, 2, 3], \"max_tokens\": 4}'; echo\n"
      "curl -s -m 60 http://127.0.0.1:$PORT/metrics | grep '^moex_rank_'\n"
      "kill -STOP $RANK1\n"
      "curl -s -m 60 http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' "
      "-d '{\"prompt\": [1, 2, 3], \"max_tokens\": 4}'; echo\n"
      "kill -CONT $RANK1; kill -TERM $MPIRUN");
  EXPECT_NE(r.out.find("\"finish_reason\":\"length\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("moex_rank_network_sent_bytes_total{rank=\"1\"}"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("moex_rank_experts{rank=\"0\"}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("moex_rank_store_read_bytes_total{rank=\"1\"}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("moex_rank_store_wait_seconds_total{rank=\"0\"}"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("rank 1 did not answer layer"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("mpirun=124"), std::string::npos) << "hung:\n" << r.out;
}

}  // namespace
}  // namespace moex

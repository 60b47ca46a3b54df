// `moex tune` end to end on the demo model's MT-Bench trace: it ranks the candidates by
// modelled TPOT, never above lru's, reports the bounds and what it skipped, saves a state
// that `generate` loads, cleans up its split, and refuses bad input naming the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "support/run_command.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

using testing::Moex;
using testing::RunCommand;

namespace fs = std::filesystem;

const std::string kDemo = (testing::SourceDir() / "models/olmoe-demo").string();
const std::string kTrace = kDemo + "/traces/mtbench.trace";
const std::string kCosts = " --budget 25% --hardware rtx4090 --scale-to olmoe:full";

TEST(CliTuneTest, RanksCandidatesBesideLruAndTheBounds) {
  testing::TempDir dir;
  // TMPDIR shows that the split traces are removed afterwards.
  fs::create_directory(dir / "tmp");
  const auto r = RunCommand("TMPDIR=" + (dir / "tmp") + " " +
                            Moex("tune --trace " + kTrace + kCosts +
                                 " --policies lru,lfu,random,belady,oracle,nextgate --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_empty(dir / "tmp"));
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key :
       {"best", "lru", "belady", "oracle_belady", "candidates", "skipped", "split", "model"})
    EXPECT_TRUE(j.contains(key)) << key;

  const double lru = j["lru"]["tpot_ms"].get<double>();
  EXPECT_GT(lru, 0);
  EXPECT_LE(j["best"]["tpot_ms"].get<double>(), lru);
  EXPECT_LT(j["belady"]["tpot_ms"].get<double>(), lru);
  EXPECT_LE(j["belady_bypass"]["tpot_ms"].get<double>(), j["belady"]["tpot_ms"].get<double>());
  EXPECT_LT(j["oracle_belady"]["tpot_ms"].get<double>(), lru);
  EXPECT_DOUBLE_EQ(j["lru"]["gap_closed"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["oracle_belady"]["gap_closed"].get<double>(), 100);
  EXPECT_GT(j["split"]["learn"]["requests"].get<int>(), j["split"]["judge"]["requests"].get<int>());
  EXPECT_GT(j["split"]["judge"]["requests"].get<int>(), 0);

  // Best first; the bounds are reported, never candidates; lru is always one.
  const auto& c = j["candidates"];
  ASSERT_GE(c.size(), 3u);
  EXPECT_EQ(c[0], j["best"]);
  bool has_lru = false;
  for (size_t i = 0; i < c.size(); ++i) {
    for (const char* key :
         {"spec", "tpot_ms", "decode_hit_rate", "decode_bytes_per_token", "gap_closed"})
      EXPECT_TRUE(c[i].contains(key)) << key;
    if (i > 0) {
      EXPECT_LE(c[i - 1]["tpot_ms"].get<double>(), c[i]["tpot_ms"].get<double>());
    }
    const std::string spec = c[i]["spec"];
    EXPECT_EQ(spec.find("belady"), std::string::npos) << spec;
    EXPECT_EQ(spec.find("oracle"), std::string::npos) << spec;
    has_lru = has_lru || spec == "lru";
  }
  EXPECT_TRUE(has_lru);
  std::set<std::string> skipped;
  for (const auto& s : j["skipped"]) skipped.insert(s["name"].get<std::string>());
  EXPECT_TRUE(skipped.count("belady"));
  EXPECT_TRUE(skipped.count("oracle"));
  EXPECT_TRUE(skipped.count("nextgate"));  // The trace has no gate inputs.
  EXPECT_EQ(j["beyond_max_candidates"], 0);
}

TEST(CliTuneTest, MaxCandidatesKeepsLruAndCountsTheRest) {
  const auto r = RunCommand(
      Moex("tune --trace " + kTrace + " --policies lru,random --max-candidates 1 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["candidates"].size(), 1u);
  EXPECT_EQ(j["candidates"][0]["spec"], "lru");
  EXPECT_EQ(j["beyond_max_candidates"], 1);
}

TEST(CliTuneTest, LearnsOnOneTraceJudgesOnAnotherAndSavesTheBestState) {
  testing::TempDir dir;
  const std::string learn = dir / "learn.trace", judge = dir / "judge.trace";
  const auto split =
      RunCommand(Moex("trace split " + kTrace + " --learn " + learn + " --test " + judge));
  ASSERT_EQ(split.exit_code, 0) << split.err;

  const std::string state = dir / "best.state";
  // Costed as the demo model itself, so that the state fits the engine's demo model.
  const auto r = RunCommand(Moex("tune --learn " + learn + " --judge " + judge + " --budget 25%" +
                                 " --policies lru,lfu --max-candidates 2 --save-state " + state));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("spec"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(bound)"), std::string::npos) << r.out;
  const size_t at = r.out.find("\nbest: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string best = r.out.substr(at + 7, r.out.find(' ', at + 7) - at - 7);
  EXPECT_TRUE(best == "lru" || best == "lfu") << r.out;
  EXPECT_NE(r.out.find("lru ", at), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("oracle+belady", at), std::string::npos) << r.out;
  ASSERT_TRUE(fs::is_regular_file(state));

  // The state is the winner's, for the engine.
  const auto gen = RunCommand(Moex("generate --model " + kDemo + " --prompt Hello --max-tokens 2 " +
                                   "--host-budget 25% --store " + (dir / "experts.moex") +
                                   " --policy " + best + " --policy-state " + state));
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
}

TEST(CliTuneTest, BadInputsGiveClearErrors) {
  testing::TempDir dir;
  // A routing log of another model shape (8 experts, top-2), imported as a trace.
  {
    std::ofstream log(dir / "other.jsonl");
    log << R"({"type": "meta", "model_id": "acme/small", "layers_logged": [0], "top_k": 2, )"
        << R"("num_experts": 8})"
        << "\n";
    for (int t = 0; t < 4; ++t)
      log << R"({"type": "route", "req_id": "a", "token_idx": )" << t
          << R"(, "layer": 0, "topk_ids": [1, 2], "topk_weights": [0.5, 0.5]})"
          << "\n";
  }
  const std::string other = dir / "other.trace";
  const auto im = RunCommand(
      Moex("trace import --format vllm-jsonl --in " + (dir / "other.jsonl") + " --out " + other));
  ASSERT_EQ(im.exit_code, 0) << im.err;

  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"tune --budget 25%", "--trace"},
      {"tune --trace " + (dir / "none.trace"), "no trace file"},
      {"tune --learn " + kTrace, "--learn needs --judge"},
      {"tune --trace " + kTrace + " --judge " + kTrace, "give it alone"},
      {"tune --learn " + other + " --judge " + kTrace, "different shapes"},
      {"tune --trace " + kTrace + " --budget 25percent", "invalid budget unit"},
      {"tune --trace " + kTrace + " --budget lots", "invalid budget"},
      {"tune --trace " + kTrace + " --policies lru,nosuch", "unknown policy 'nosuch'"},
      {"tune --trace " + kTrace + " --policies lru:x=1", "takes policy names"},
      {"tune --trace " + kTrace + " --hardware abacus", "unknown hardware profile"},
      {"tune --trace " + kTrace + " --save-state " + dir.path().string(), "is a directory"},
  };
  for (const Case& c : cases) {
    const auto r = RunCommand(Moex(c.args));
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
}  // namespace moex

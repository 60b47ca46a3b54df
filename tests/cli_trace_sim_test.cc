// `moex trace record`, `trace info` and `moex sim` end to end on the demo model: the
// simulator's counts equal those the engine reported while recording, sweeps draw a
// report, and bad inputs give clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/run_command.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

using testing::Moex;
using testing::RunCommand;

const std::string kDemo = (testing::SourceDir() / "models/olmoe-demo").string();

std::string WritePrompts(const testing::TempDir& dir) {
  std::ofstream out(dir / "prompts.txt");
  out << "The history of the city begins\n\nQuestion: what is 3 + 4?\ndef main():\n";
  return dir / "prompts.txt";
}

TEST(CliTraceSimTest, SimulatorMatchesTheRecordingEngine) {
  testing::TempDir dir;
  const std::string trace = dir / "demo.trace";
  const auto rec = RunCommand(Moex("trace record --model " + kDemo + " --prompts " +
                                   WritePrompts(dir) + " --max-tokens 6 --out " + trace +
                                   " --host-budget 25% --policy lfu --store " +
                                   (dir / "experts.moex") + " --json"));
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  const auto r = nlohmann::json::parse(rec.out);
  EXPECT_EQ(r["requests"], 3);
  EXPECT_GT(r["iterations"].get<int>(), 3);

  const auto sim = RunCommand(Moex("sim --trace " + trace + " --policy lfu --budget 25% --json"));
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const auto s = nlohmann::json::parse(sim.out);
  EXPECT_EQ(s["hits"], r["offload"]["hits"]);
  EXPECT_EQ(s["misses"], r["offload"]["misses"]);
  EXPECT_EQ(s["requests"], 3);
  EXPECT_GT(s["modelled"]["tpot_ms"].get<double>(), 0);
  EXPECT_EQ(s["hardware"]["name"], "this-machine");

  const auto info = RunCommand(Moex("trace info " + trace + " --json"));
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const auto i = nlohmann::json::parse(info.out);
  EXPECT_EQ(i["counts"]["requests"], 3);
  EXPECT_EQ(i["model"]["num_experts"], 64);
  EXPECT_EQ(i["layers"].size(), 16u);

  const auto sweep = RunCommand(Moex("sim --trace " + trace +
                                     " --policy lru,belady --budget 10%,50% --hardware rtx4090 "
                                     "--scale-to olmoe:full --json --html " +
                                     (dir / "r.html")));
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const auto w = nlohmann::json::parse(sweep.out);
  ASSERT_EQ(w["results"].size(), 4u);
  EXPECT_EQ(w["results"][0]["expert_bytes"], 3 * 2048 * 1024 * 2);  // OLMoE-1B-7B, BF16.
  EXPECT_GE(w["results"][2]["hits"].get<int64_t>(), w["results"][0]["hits"].get<int64_t>());
  std::ifstream html(dir / "r.html");
  const std::string page{std::istreambuf_iterator<char>(html), std::istreambuf_iterator<char>()};
  EXPECT_NE(page.find("<svg"), std::string::npos);
  EXPECT_NE(page.find("rtx4090"), std::string::npos);
}

TEST(CliTraceSimTest, BadInputsGiveClearErrors) {
  testing::TempDir dir;
  {
    std::ofstream junk(dir / "junk.trace");
    junk << "definitely not a trace file";
  }
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"sim --trace " + (dir / "junk.trace"), "not a moex trace"},
      {"sim --trace " + (dir / "none.trace"), "cannot open trace"},
      {"sim --trace " + (dir / "junk.trace") + " --hardware abacus", "unknown hardware profile"},
      {"trace info " + (dir / "junk.trace"), "not a moex trace"},
      {"trace record --model " + kDemo + " --prompts " + (dir / "none.txt") + " --out " +
           (dir / "x.trace"),
       "prompt file: cannot open"},
      {"trace record --model " + kDemo + " --prompts " + (dir / "junk.trace") +
           " --prompt-format sharegpt --out " + (dir / "x.trace"),
       "not valid JSON"},
      {"trace record --model " + kDemo + " --prompts " + (dir / "junk.trace") +
           " --probs f8 --out " + (dir / "x.trace"),
       "invalid precision"},
  };
  for (const Case& c : cases) {
    const auto r = RunCommand(Moex(c.args));
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "x.trace"));

  const auto list = RunCommand(Moex("sim --list-hardware"));
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("this-machine"), std::string::npos);
  EXPECT_NE(list.out.find("h100-pcie5"), std::string::npos);
}

}  // namespace
}  // namespace moex

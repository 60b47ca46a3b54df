// End-to-end reproductions of bugs found by a new-user test with bad inputs (issue 20):
// each once crashed, lost data, or answered with a wrong or misleading message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "io/expert_store.h"
#include "io/gguf_writer.h"
#include "support/run_command.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using testing::Moex;
using testing::ReadFile;
using testing::RunCommand;

// Runs with writes beyond `bytes` failing like a full disk (EFBIG; SIGXFSZ ignored).
std::string WithFileSizeLimit(int64_t bytes, const std::string& command) {
  return "trap '' XFSZ; ulimit -f " + std::to_string(bytes / 512) + "; " + command;
}

std::vector<std::string> Names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CliReliability, BatchPrintsAndReturnsEverySequence) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const std::string args = "generate --model " + model +
                           " --prompt-ids 1,2,3 --max-tokens 5 --ignore-eos --batch 3 "
                           "--temperature 1.5 --seed 11";
  const auto json = RunCommand(Moex(args + " --json"));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["sequences"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j["sequences"][i]["tokens"].size(), 5u) << i;
    EXPECT_EQ(j["sequences"][i]["seed"], 11 + i);
  }
  EXPECT_EQ(j["tokens"], j["sequences"][0]["tokens"]);
  // Different seeds: 5 tokens each from 512 at temperature 1.5 cannot all agree.
  EXPECT_FALSE(j["sequences"][0]["tokens"] == j["sequences"][1]["tokens"] &&
               j["sequences"][1]["tokens"] == j["sequences"][2]["tokens"]);
  // TTFT includes the prefill it waited for.
  EXPECT_GE(j["timings"]["ttft_ms"].get<double>(), j["timings"]["prefill_ms"].get<double>());

  const auto text = RunCommand(Moex(args));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (int i = 0; i < 3; ++i) {
    const std::string header = "--- sequence " + std::to_string(i);
    EXPECT_NE(text.out.find(header), std::string::npos) << text.out;
    // Each sequence's ids, as --json gave them, follow its header.
    std::string ids;
    for (const auto& t : j["sequences"][i]["tokens"]) ids += std::to_string(t.get<int>()) + " ";
    EXPECT_NE(text.out.find(ids), std::string::npos) << text.out;
  }
}

TEST(CliReliability, SingleSequenceTtftIsNotBelowPrefill) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const auto r = RunCommand(
      Moex("generate --model " + model + " --prompt-ids 1,2,3,4,5,6 --max-tokens 2 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto t = nlohmann::json::parse(r.out)["timings"];
  EXPECT_GE(t["ttft_ms"].get<double>(), t["prefill_ms"].get<double>());
}

TEST(CliReliability, NanWeightsAreReportedNotSampled) {
  testing::TempDir dir;
  fs::copy(testing::TinyModelPath(Arch::kOlmoe, DType::kF32), dir.path() / "m",
           fs::copy_options::recursive);
  testing::PoisonTensorWithNaN(dir / "m/model.safetensors", "model.norm.weight");
  const auto r = RunCommand(Moex("generate --model " + (dir / "m") + " --prompt-ids 1,2"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("non-finite logit"), std::string::npos) << r.err;
}

TEST(CliReliability, SharedExpertsInTheCheckpointNeedASize) {
  testing::TempDir dir;
  fs::copy(testing::TinyModelPath(Arch::kQwen2Moe), dir.path() / "m", fs::copy_options::recursive);
  auto config = nlohmann::json::parse(std::ifstream(dir / "m/config.json"));
  ASSERT_GT(config["shared_expert_intermediate_size"].get<int>(), 0);
  config["shared_expert_intermediate_size"] = 0;
  std::ofstream(dir / "m/config.json") << config.dump();
  const auto r = RunCommand(Moex("generate --model " + (dir / "m") + " --prompt-ids 1,2"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has shared experts"), std::string::npos) << r.err;
}

TEST(CliReliability, BadThreadCountInTheEnvironmentIsNamed) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  for (const char* value : {"abc", "0", "-3", "4x"}) {
    const auto r = RunCommand(std::string("MOEX_THREADS=") + value + " " +
                              Moex("generate --model " + model + " --prompt-ids 1 --max-tokens 1"));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(std::string("ignoring MOEX_THREADS=") + value), std::string::npos)
        << r.err;
  }
  const auto ok = RunCommand("MOEX_THREADS=2 " +
                             Moex("generate --model " + model + " --prompt-ids 1 --max-tokens 1"));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.err.find("MOEX_THREADS"), std::string::npos) << ok.err;
}

// MOEX_LOG names a level; another value is named and ignored (the run goes on at warn),
// and `debug` says what the default does not (the offloaded cache's info line).
TEST(CliReliability, BadLogLevelInTheEnvironmentIsNamed) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const std::string run =
      Moex("generate --model " + model + " --prompt-ids 1 --max-tokens 1 --host-budget 50%");
  const auto bad = RunCommand("MOEX_LOG=loud " + run);
  EXPECT_EQ(bad.exit_code, 0) << bad.err;
  EXPECT_NE(bad.err.find("ignoring MOEX_LOG=loud (expected error, warn, info or debug)"),
            std::string::npos)
      << bad.err;
  const auto quiet = RunCommand("MOEX_LOG=warn " + run);
  const auto debug = RunCommand("MOEX_LOG=debug " + run);
  EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(debug.exit_code, 0) << debug.err;
  EXPECT_EQ(quiet.err.find("MOEX_LOG"), std::string::npos) << quiet.err;
  EXPECT_EQ(quiet.err.find("host expert cache:"), std::string::npos) << quiet.err;
  EXPECT_NE(debug.err.find("host expert cache:"), std::string::npos) << debug.err;
}

TEST(CliReliability, FullDiskLeavesNoPartialFiles) {
  testing::TempDir dir;
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  // Logits of 4 tokens over 512 entries are 8 KiB; the limit is 4 KiB.
  auto r = RunCommand(WithFileSizeLimit(
      4096, Moex("logits --model " + model + " --prompt-ids 1,2,3,4 --out " + (dir / "l.f32"))));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("too large"), std::string::npos) << r.err;
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{});

  r = RunCommand(WithFileSizeLimit(
      64 * 1024, Moex("random-model --arch olmoe --size tiny --out " + (dir / "rm"))));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{}) << r.err;

  // The hint names the option that moves the store.
  r = RunCommand(WithFileSizeLimit(
      64 * 1024, Moex("generate --model " + model + " --prompt-ids 1 --host-budget 10% --store " +
                      (dir / "s.moex"))));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("disk full?"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--store"), std::string::npos) << r.err;
  r = RunCommand(
      WithFileSizeLimit(64 * 1024, Moex("pack --model " + model + " --out " + (dir / "p.moex"))));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
  for (const std::string& name : Names(dir.path()))
    EXPECT_EQ(name.find(".partial"), std::string::npos) << name;
}

// pack --verify reads the finished store back, block by block.
TEST(CliReliability, PromptsAreBoundedByASizeAndTheContext) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  // An endless prompt file stops at the limit instead of exhausting memory.
  auto r = RunCommand(Moex("generate --model " + model + " --prompt-file /dev/zero"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("prompt file '/dev/zero' holds more than 64 MiB"), std::string::npos)
      << r.err;
  // `logits` keeps a KV cache for the whole prompt: past the context it is refused.
  const auto config = nlohmann::json::parse(ReadFile(model + "/config.json"));
  const int context = config["max_position_embeddings"];
  std::string ids = "1";
  for (int i = 0; i < context; ++i) ids += ",1";
  testing::TempDir dir;
  r = RunCommand(
      Moex("logits --model " + model + " --prompt-ids " + ids + " --out " + (dir / "l.f32")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("more than the model's context of " + std::to_string(context)),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "l.f32"));
}

TEST(CliReliability, PackVerifyReadsTheStoreBack) {
  testing::TempDir dir;
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const auto r =
      RunCommand(Moex("pack --model " + model + " --out " + (dir / "s.moex") + " --verify"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["verified"], true);
  EXPECT_TRUE(j.contains("verify_seconds"));
  const auto plain = RunCommand(Moex("pack --model " + model + " --out " + (dir / "s.moex")));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(nlohmann::json::parse(plain.out).contains("verified"));
}

// pack --verify on a store that is current for the model checks it without repacking (same
// file, "packed": false); a corrupt block is an error naming it that flags the store, and
// the next pack --verify rebuilds it.
TEST(CliReliability, PackVerifyChecksAnExistingStoreWithoutRepacking) {
  testing::TempDir dir;
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const std::string store = dir / "s.moex";
  const std::string verify = Moex("pack --model " + model + " --out " + store + " --verify");
  ASSERT_EQ(RunCommand(Moex("pack --model " + model + " --out " + store)).exit_code, 0);
  const auto before = fs::last_write_time(store);
  const auto r = RunCommand(verify);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["packed"], false);
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(fs::last_write_time(store), before);  // Not rewritten.

  // One flipped byte in the first expert's data.
  const ExpertStore opened = ExpertStore::Open(store);
  const uint64_t at = opened.ExpertOffset(opened.moe_layers().front(), 0);
  {
    std::fstream f(store, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
  }
  const auto bad = RunCommand(verify);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("expert 0 block 0 fails its checksum"), std::string::npos) << bad.err;
  EXPECT_TRUE(fs::exists(store + ".corrupt"));

  const auto again = RunCommand(verify);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["packed"], true);
  EXPECT_FALSE(fs::exists(store + ".corrupt"));
}

// A GGUF whose tokenizer moex cannot use (here a pre-tokenizer it does not know) still runs
// on token ids, as in llama.cpp; only text is refused, naming the reason.
TEST(CliReliability, UnknownGgufTokenizerRunsOnIds) {
  testing::TempDir dir;
  GgufWriter vocab;
  std::vector<std::string> tokens;
  for (int i = 0; i < 64; ++i) tokens.push_back("t" + std::to_string(i));
  vocab.Set("general.architecture", GgufValue::String("gptneox"));
  vocab.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  vocab.Set("tokenizer.ggml.pre", GgufValue::String("tomorrows-pre"));
  vocab.Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  vocab.Set("tokenizer.ggml.merges", GgufValue::StringArray({"t 0"}));
  vocab.Write(dir / "vocab.gguf");
  ASSERT_EQ(RunCommand(Moex("random-model --format gguf --gguf-vocab " + (dir / "vocab.gguf") +
                            " --out " + (dir / "m.gguf")))
                .exit_code,
            0);
  const auto ids = RunCommand(
      Moex("generate --model " + (dir / "m.gguf") + " --prompt-ids 1,2 --max-tokens 2 --json"));
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_EQ(nlohmann::json::parse(ids.out)["tokens"].size(), 2u);
  EXPECT_NE(ids.err.find("tomorrows-pre"), std::string::npos) << ids.err;
  const auto text =
      RunCommand(Moex("generate --model " + (dir / "m.gguf") + " --prompt hi --max-tokens 2"));
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.err.find("tomorrows-pre"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("--prompt-ids"), std::string::npos) << text.err;
}

TEST(CliReliability, VersionAndHelpWithDefaults) {
  const auto v = RunCommand(Moex("--version"));
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("moex ", 0), 0u) << v.out;
  const auto help = RunCommand(Moex("generate --help"));
  EXPECT_EQ(help.exit_code, 0);
  const size_t at = help.out.find("--max-tokens");
  ASSERT_NE(at, std::string::npos) << help.out;
  const std::string line = help.out.substr(at, help.out.find('\n', at) - at);
  EXPECT_NE(line.find("64"), std::string::npos) << line;  // The default.
}

}  // namespace
}  // namespace moex

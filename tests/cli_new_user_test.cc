// The new user's path end to end: random models that take text, prompts from files and
// stdin, `moex chat`, the budget warning, and a read-only model directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/run_command.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using testing::Moex;
using testing::MoexBinary;
using testing::ReadFile;
using testing::RunCommand;

// A tiny random OLMoE written by the command, with its default byte-level tokenizer.
std::string RandomModelWithTokenizer(const testing::TempDir& dir) {
  const auto r = RunCommand(Moex("random-model --arch olmoe --size tiny --out " + (dir / "m")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir / "m";
}

TEST(NewUserPath, RandomModelTakesTextChatAndPromptFiles) {
  testing::TempDir dir;
  const std::string model = RandomModelWithTokenizer(dir);
  ASSERT_TRUE(fs::exists(model + "/tokenizer.json"));
  const std::string gen = "generate --model " + model + " --max-tokens 4 --ignore-eos --json ";
  const auto text = RunCommand(Moex(gen + "--prompt 'Hello, world'"));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const auto j = nlohmann::json::parse(text.out);
  EXPECT_EQ(j["prompt_tokens"], 12);  // One token per byte: no merges.
  EXPECT_EQ(j["tokens"].size(), 4u);

  const auto chat = RunCommand(Moex(gen + "--prompt 'Hi' --chat"));
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  // "<|user|>\nHi\n<|assistant|>\n": 8 + 1 + 2 + 1 + 13 + 1 = 26 bytes.
  EXPECT_EQ(nlohmann::json::parse(chat.out)["prompt_tokens"], 26);

  std::ofstream(dir / "prompt.txt") << "Hello, world\n";
  const auto file = RunCommand(Moex(gen + "--prompt-file " + (dir / "prompt.txt")));
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_EQ(nlohmann::json::parse(file.out)["tokens"], j["tokens"]);
  const auto stdin_run = RunCommand("(printf 'Hello, world' | " + Moex(gen + "--prompt -") + ")");
  ASSERT_EQ(stdin_run.exit_code, 0) << stdin_run.err;
  EXPECT_EQ(nlohmann::json::parse(stdin_run.out)["tokens"], j["tokens"]);

  const auto missing = RunCommand(Moex(gen + "--prompt-file " + (dir / "nope.txt")));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("cannot read prompt file"), std::string::npos) << missing.err;
  const auto two = RunCommand(Moex(gen + "--prompt x --prompt-file " + (dir / "prompt.txt")));
  EXPECT_NE(two.err.find("exactly one"), std::string::npos) << two.err;
}

TEST(NewUserPath, ChatKeepsHistoryEndsOnExitAndResetForgetsIt) {
  testing::TempDir dir;
  const std::string model = RandomModelWithTokenizer(dir);
  const std::string chat = Moex("chat --model " + model + " --max-tokens 3");
  // Greedy: after /reset the same line is the same prompt, so the same reply; each reply
  // ends with one newline (the random tokens may hold more).
  const auto reset =
      RunCommand("(printf 'same\\n/reset\\nsame\\n/exit\\nnever\\n' | " + chat + ")");
  ASSERT_EQ(reset.exit_code, 0) << reset.err;
  EXPECT_NE(reset.err.find("conversation forgotten"), std::string::npos) << reset.err;
  ASSERT_EQ(reset.out.size() % 2, 0u) << reset.out;
  const std::string first = reset.out.substr(0, reset.out.size() / 2);
  EXPECT_EQ(reset.out.substr(reset.out.size() / 2), first);
  EXPECT_EQ(first.back(), '\n');
  // The reply to one line alone is the first half: nothing after /exit was answered.
  const auto once = RunCommand("(printf 'same\\n' | " + chat + ")");
  ASSERT_EQ(once.exit_code, 0) << once.err;
  EXPECT_EQ(once.out, first);
  // Without /reset the first reply is the same, and the second one is what generate gives
  // for the whole rendered conversation (the model's template: <|role|>\ntext\n).
  const auto kept = RunCommand("(printf 'same\\nsame\\n' | " + chat + ")");
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  ASSERT_EQ(kept.out.substr(0, first.size()), first);
  const std::string reply1 = first.substr(0, first.size() - 1);
  const std::string history =
      "<|user|>\nsame\n<|assistant|>\n" + reply1 + "\n<|user|>\nsame\n<|assistant|>\n";
  // --prompt-file drops one trailing newline: give it one more.
  std::ofstream(dir / "history.txt", std::ios::binary) << history << "\n";
  const auto expected = RunCommand(
      Moex("generate --model " + model + " --max-tokens 3 --prompt-file " + (dir / "history.txt")));
  ASSERT_EQ(expected.exit_code, 0) << expected.err;
  EXPECT_EQ(kept.out.substr(first.size()), expected.out);
  // Without a tokenizer: a clear error.
  const auto none = RunCommand(Moex("chat --model " + testing::TinyModelPath(Arch::kOlmoe)));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no tokenizer"), std::string::npos) << none.err;
}

// A message too long for the context is refused on its own; the conversation goes on.
TEST(NewUserPath, ChatSurvivesAMessageTooLongForTheContext) {
  testing::TempDir dir;
  const std::string model = RandomModelWithTokenizer(dir);
  const auto config = nlohmann::json::parse(std::ifstream(model + "/config.json"));
  const int context = config["max_position_embeddings"];
  std::ofstream(dir / "turns.txt") << std::string(static_cast<size_t>(context), 'a') << "\nhi\n";
  const std::string chat = Moex("chat --model " + model + " --max-tokens 3");
  const auto r = RunCommand("(cat " + (dir / "turns.txt") + " | " + chat + ")");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("too long for the model's context"), std::string::npos) << r.err;
  const auto alone = RunCommand("(printf 'hi\\n' | " + chat + ")");
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_EQ(r.out, alone.out);  // The refused message left no trace in the history.
}

TEST(NewUserPath, TokenizerLargerThanTheVocabularyIsRefused) {
  testing::TempDir dir;
  // A tokenizer for 50304 ids beside a 512-token model.
  const auto big =
      RunCommand(Moex("random-model --arch olmoe --size tiny --no-tokenizer --out " + (dir / "m")));
  ASSERT_EQ(big.exit_code, 0) << big.err;
  const auto donor = RunCommand(Moex("random-model --arch olmoe --size tiny --out " + (dir / "d")));
  ASSERT_EQ(donor.exit_code, 0) << donor.err;
  auto config = nlohmann::json::parse(std::ifstream(dir / "d/config.json"));
  ASSERT_EQ(config["vocab_size"], 512);
  auto tok = nlohmann::json::parse(std::ifstream(dir / "d/tokenizer.json"));
  tok["model"]["vocab"]["<|extra|>"] = 600;
  std::ofstream(dir / "m/tokenizer.json") << tok.dump();
  const auto r = RunCommand(Moex("generate --model " + (dir / "m") + " --prompt hi"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("601 tokens, more than the model's vocabulary of 512"), std::string::npos)
      << r.err;
}

TEST(NewUserPath, BudgetBelowOnePassIsWarnedWithABetterOne) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const auto config = nlohmann::json::parse(std::ifstream(model + "/config.json"));
  const int experts = config["num_experts"], top_k = config["num_experts_per_tok"];
  const int percent = (100 * top_k + experts - 1) / experts;  // Every layer is MoE.
  ASSERT_GT(percent, 5);
  testing::TempDir dir;
  const std::string gen = "generate --model " + model + " --prompt-ids 1,2 --max-tokens 2 " +
                          "--store " + (dir / "s.moex") + " --host-budget ";
  const auto small = RunCommand(Moex(gen + "5% --policy lru"));
  ASSERT_EQ(small.exit_code, 0) << small.err;
  EXPECT_NE(small.err.find("use --host-budget " + std::to_string(percent) + "% or more"),
            std::string::npos)
      << small.err;
  EXPECT_NE(small.err.find("--policy reuse"), std::string::npos) << small.err;
  // A cycle-aware evictor is not told to switch.
  const auto cycle = RunCommand(Moex(gen + "5% --policy cycle-lru"));
  ASSERT_EQ(cycle.exit_code, 0) << cycle.err;
  EXPECT_NE(cycle.err.find("use --host-budget"), std::string::npos) << cycle.err;
  EXPECT_EQ(cycle.err.find("--policy reuse"), std::string::npos) << cycle.err;
  const auto enough =
      RunCommand(Moex(gen + std::to_string(std::min(100, percent + 5)) + "% --policy lru"));
  ASSERT_EQ(enough.exit_code, 0) << enough.err;
  EXPECT_EQ(enough.err.find("use --host-budget"), std::string::npos) << enough.err;
}

// A model directory the user cannot write: the store goes to $XDG_CACHE_HOME/moex. Root
// may write anywhere, so as root the run drops to user nobody.
TEST(NewUserPath, ReadOnlyModelDirectoryUsesTheCache) {
  testing::TempDir dir;
  fs::permissions(dir.path(), fs::perms(0755));
  fs::copy(testing::TinyModelPath(Arch::kOlmoe), dir.path() / "m", fs::copy_options::recursive);
  fs::create_directory(dir.path() / "cache");
  fs::permissions(dir.path() / "cache", fs::perms(0777));
  for (const auto& e : fs::directory_iterator(dir.path() / "m"))
    fs::permissions(e.path(), fs::perms(0444));
  fs::permissions(dir.path() / "m", fs::perms(0555));
  // As root the test drops to nobody, who may not reach the build tree (a clone under a
  // 0700 directory): that user runs a copy of the binary from the 0755 test directory.
  const bool as_nobody = geteuid() == 0;
  std::string moex = MoexBinary();
  if (as_nobody) {
    fs::copy_file(moex, dir / "moex");
    moex = dir / "moex";
  }
  const auto r = RunCommand(
      std::string(as_nobody ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "") +
      "env XDG_CACHE_HOME=" + (dir / "cache") + " " + moex + " generate --model " + (dir / "m") +
      " --prompt-ids 1,2 --max-tokens 2 --host-budget 50% --json");
  fs::permissions(dir.path() / "m", fs::perms(0755));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir / "m/experts.moex"));
  int stores = 0;
  for (const auto& e : fs::directory_iterator(dir.path() / "cache/moex"))
    stores += e.path().filename().string().starts_with("m-") && e.path().extension() == ".moex";
  EXPECT_EQ(stores, 1);
}

// `cmake --install` puts moex and the demo model where the installed binary finds it: no
// --model needed, and nothing points back into the build or source tree.
TEST(NewUserPath, InstalledMoexFindsItsDemoModel) {
  testing::TempDir dir;
  const fs::path build = fs::path(MoexBinary()).parent_path();
  const auto install =
      RunCommand("cmake --install " + build.string() + " --prefix " + (dir / "prefix"));
  ASSERT_EQ(install.exit_code, 0) << install.err;
  ASSERT_TRUE(fs::exists(dir / "prefix/bin/moex"));
  ASSERT_TRUE(fs::exists(dir / "prefix/share/moex/models/olmoe-demo/config.json"));
  EXPECT_FALSE(fs::exists(dir / "prefix/share/moex/models/olmoe-demo/experts.moex"));
  const auto r = RunCommand("env -u MOEX_MODEL " + (dir / "prefix/bin/moex") +
                            " generate --prompt-ids 1,2 --max-tokens 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["model"],
            fs::weakly_canonical(dir.path() / "prefix/share/moex/models/olmoe-demo").string());
  // A copy of the binary with no model beside it says where it looked.
  fs::copy_file(dir / "prefix/bin/moex", dir / "lonely-moex");
  const auto lonely =
      RunCommand("env -u MOEX_MODEL " + (dir / "lonely-moex") + " generate --prompt-ids 1");
  EXPECT_EQ(lonely.exit_code, 1);
  EXPECT_NE(lonely.err.find("pass --model or set MOEX_MODEL"), std::string::npos) << lonely.err;
}

}  // namespace
}  // namespace moex

// Outputs never replace what a command reads (issue 41, class 1): the rule itself
// (io/output_guard.h), then every command that writes a file, run as a user would.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/output_guard.h"
#include "support/run_command.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using testing::Moex;
using testing::ReadFile;
using testing::RunCommand;

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string ErrorOf(const std::string& path, const OutputRules& rules) {
  try {
    CheckOutputPath(path, rules);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OutputGuard, NeverOverAnInputNorInsideAnInputDirectory) {
  testing::TempDir dir;
  fs::create_directories(dir / "model");
  Write(dir / "model/config.json", "{}");
  Write(dir / "prompts.txt", "hi\n");
  fs::create_symlink(dir / "prompts.txt", dir / "link.txt");
  const OutputRules rules{
      .flag = "--out", .reads = {dir / "model", dir / "prompts.txt"}, .force = true};
  // Even with --force: the input itself, through a link or a detour, and the model's files.
  for (const std::string& out :
       {dir / "prompts.txt", dir / "link.txt", dir / "model/../prompts.txt",
        dir / "model/config.json", dir / "model/new.bin", dir / "model"}) {
    const std::string error = ErrorOf(out, rules);
    EXPECT_NE(error.find("this command reads"), std::string::npos) << out << ": " << error;
    EXPECT_NE(error.find("--out"), std::string::npos) << error;
  }
  EXPECT_EQ(ErrorOf(dir / "elsewhere.bin", rules), "");
  EXPECT_EQ(ErrorOf(dir / "model-copy.bin", rules), "");  // A sibling's name, not inside.
}

TEST(OutputGuard, AnExistingFileNeedsForceUnlessItIsTheSameKind) {
  testing::TempDir dir;
  Write(dir / "notes.txt", "keep me");
  Write(dir / "old.trace", "MOEXTRC\nrest");
  OutputRules rules;
  rules.flag = "--out";
  rules.same_kind = [](const std::string& p) { return FileStartsWith(p, "MOEXTRC\n"); };
  const std::string error = ErrorOf(dir / "notes.txt", rules);
  EXPECT_NE(error.find("already exists; pass --force"), std::string::npos) << error;
  EXPECT_EQ(ErrorOf(dir / "old.trace", rules), "");
  rules.force = true;
  EXPECT_EQ(ErrorOf(dir / "notes.txt", rules), "");
  EXPECT_FALSE(FileStartsWith(dir / "missing", "MOEXTRC\n"));
}

// Each command, on the class's examples: the input survives byte for byte.
class OutputGuardCli : public ::testing::Test {
 protected:
  void SetUp() override {
    // A tiny model with its byte-level tokenizer, so that prompts may be text.
    model_ = dir_ / "model";
    const auto m = RunCommand(Moex("random-model --arch olmoe --size tiny --out " + model_));
    ASSERT_EQ(m.exit_code, 0) << m.err;
    Write(dir_ / "prompts.txt", "Hello there\nGood morning\n");
    const auto r =
        RunCommand(Moex("trace record --model " + model_ + " --prompts " + (dir_ / "prompts.txt") +
                        " --prompt-format text --max-tokens 2 --out " + (dir_ / "t.trace")));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  void ExpectRefused(const std::string& command, const std::string& kept,
                     const std::string& message) {
    const std::string before = ReadFile(kept);
    const auto r = RunCommand(Moex(command));
    EXPECT_NE(r.exit_code, 0) << command;
    EXPECT_NE(r.err.find(message), std::string::npos) << command << "\n" << r.err;
    EXPECT_EQ(ReadFile(kept), before) << kept << " changed";
  }
  testing::TempDir dir_;
  std::string model_;
};

TEST_F(OutputGuardCli, OutputsOverInputsAreRefused) {
  const std::string weights = model_ + "/model.safetensors";
  ExpectRefused("logits --model " + model_ + " --prompt-ids 1,2 --out " + weights + " --force",
                weights, "this command reads");
  ExpectRefused("trace record --model " + model_ + " --prompts " + (dir_ / "prompts.txt") +
                    " --prompt-format text --max-tokens 2 --force --out " + (dir_ / "prompts.txt"),
                dir_ / "prompts.txt", "this command reads");
  ExpectRefused("sim --trace " + (dir_ / "t.trace") + " --force --html " + (dir_ / "t.trace"),
                dir_ / "t.trace", "this command reads");
  ExpectRefused("trace split " + (dir_ / "t.trace") + " --learn " + (dir_ / "l.trace") +
                    " --test " + (dir_ / "t.trace"),
                dir_ / "t.trace", "this command reads");
  ExpectRefused("random-model --arch olmoe --size tiny --out " + model_, weights,
                "already exists; pass --force");
  ExpectRefused("random-model --arch olmoe --size tiny --format gguf --out " + weights, weights,
                "already exists; pass --force");
}

TEST_F(OutputGuardCli, OtherFilesNeedForceAndArtefactsOfTheKindAreReplaced) {
  Write(dir_ / "notes.txt", "keep me");
  ExpectRefused("logits --model " + model_ + " --prompt-ids 1,2 --out " + (dir_ / "notes.txt"),
                dir_ / "notes.txt",
                "--out " + (dir_ / "notes.txt") + " already exists; pass --force");
  ExpectRefused("sim --trace " + (dir_ / "t.trace") + " --html " + (dir_ / "notes.txt"),
                dir_ / "notes.txt", "--html");
  auto r = RunCommand(
      Moex("logits --model " + model_ + " --prompt-ids 1,2 --force --out " + (dir_ / "notes.txt")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A sim page over a sim page, a trace over a trace: no --force needed.
  const std::string sim = "sim --trace " + (dir_ / "t.trace") + " --html " + (dir_ / "p.html");
  ASSERT_EQ(RunCommand(Moex(sim)).exit_code, 0);
  r = RunCommand(Moex(sim));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunCommand(Moex("trace split " + (dir_ / "t.trace") + " --learn " + (dir_ / "a.trace") +
                      " --test " + (dir_ / "b.trace")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCommand(Moex("trace split " + (dir_ / "t.trace") + " --learn " + (dir_ / "a.trace") +
                      " --test " + (dir_ / "b.trace")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunCommand(Moex("trace split " + (dir_ / "t.trace") + " --learn " + (dir_ / "a.trace") +
                      " --test " + (dir_ / "a.trace")));
  EXPECT_NE(r.err.find("name the same file"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moex

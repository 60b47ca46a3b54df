// Every command that writes a file keeps the output rule of io/output_guard.h (issue 41,
// class 1), run as a user would: inputs survive byte for byte.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "support/run_command.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

using testing::Moex;
using testing::ReadFile;
using testing::RunCommand;

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

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

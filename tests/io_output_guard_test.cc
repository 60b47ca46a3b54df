// Outputs never replace what a command reads (issue 41, class 1): the rule itself
// (io/output_guard.h); tests/cli_output_guard_test.cc runs it through every command.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/output_guard.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

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

}  // namespace
}  // namespace moex

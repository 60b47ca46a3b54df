// Every runnable example in README.md and docs/*.md runs as written on this build.
//
// Convention (for writers of the docs):
// - A fenced block opened with ```sh is runnable; other fences (```, ```text, ```c++) are
//   not. A runnable block is run whole, as one bash script (set -euo pipefail), so later
//   commands may use what earlier ones wrote.
// - A comment line `# not-run: REASON` skips the one command after it (with its
//   continuation lines); use it for what takes too long here (a 14 GB model, a benchmark)
//   or never ends (a server). The reason is printed with the test's output.
// - Scripts run in a scratch directory laid out like a checkout: build/ is this build's
//   directory, models/, bench/, tools/ and scripts/ are the source tree's, and ../shared
//   is the source tree's ../shared when it exists. A block that uses ../shared/data is
//   skipped without it (and fails under CI=true, like every test that needs it).
// - Placeholders the user must fill in have no place in a runnable block.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/run_command.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

struct Example {
  std::string file;
  int line = 0;                      // Where the block opens.
  std::string script;                // The commands to run.
  std::vector<std::string> skipped;  // "line N: reason" of each not-run command.
};

// The runnable blocks of one markdown file.
std::vector<Example> RunnableBlocks(const fs::path& path) {
  std::vector<Example> blocks;
  std::ifstream in(path);
  std::string line;
  int number = 0;
  Example* block = nullptr;
  bool skip_next = false, continuing = false, skipping = false;
  std::string reason;
  while (std::getline(in, line)) {
    ++number;
    if (block == nullptr) {
      if (line == "```sh") {
        blocks.push_back({path.filename().string(), number, "", {}});
        block = &blocks.back();
      }
      continue;
    }
    if (line.rfind("```", 0) == 0) {
      block = nullptr;
      continue;
    }
    const bool continues = !line.empty() && line.back() == '\\';
    if (!continuing) {
      const std::string trimmed = line.substr(std::min(line.find_first_not_of(' '), line.size()));
      if (trimmed.rfind("# not-run:", 0) == 0) {
        skip_next = true;
        reason = trimmed.substr(10);
        continue;
      }
      skipping = skip_next && !trimmed.empty() && trimmed[0] != '#';
      if (skipping) {
        block->skipped.push_back("line " + std::to_string(number) + ":" + reason);
        skip_next = false;
      }
    }
    continuing = continues;
    if (!skipping) block->script += line + "\n";
  }
  return blocks;
}

std::vector<fs::path> DocFiles() {
  const fs::path root = testing::SourceDir();
  std::vector<fs::path> files = {root / "README.md"};
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// A scratch directory laid out like a checkout (see the convention above).
void LayOut(const fs::path& scratch) {
  const fs::path root = testing::SourceDir();
  fs::create_directories(scratch / "repo");
  fs::create_directory_symlink(fs::path(testing::MoexBinary()).parent_path(),
                               scratch / "repo" / "build");
  for (const char* dir : {"models", "bench", "tools", "scripts", "docs"})
    fs::create_directory_symlink(root / dir, scratch / "repo" / dir);
  if (fs::exists(root / ".." / "shared"))
    fs::create_directory_symlink(fs::canonical(root / ".." / "shared"), scratch / "shared");
}

class DocsExamples : public ::testing::TestWithParam<std::string> {};

TEST_P(DocsExamples, RunAsWritten) {
  const fs::path file = testing::SourceDir() / GetParam();
  const std::vector<Example> blocks = RunnableBlocks(file);
  ASSERT_FALSE(blocks.empty()) << GetParam() << " has no runnable (```sh) blocks";
  std::string needs_shared;  // Blocks not run for lack of ../shared/data.
  for (const Example& block : blocks) {
    SCOPED_TRACE(GetParam() + ":" + std::to_string(block.line));
    for (const std::string& s : block.skipped)
      std::cout << "[ not run  ] " << GetParam() << " " << s << "\n";
    if (block.script.find("../shared/data") != std::string::npos &&
        !fs::exists(testing::SharedDataDir())) {
      needs_shared += " " + GetParam() + ":" + std::to_string(block.line);
      continue;
    }
    testing::TempDir scratch;
    LayOut(scratch.path());
    const fs::path script = scratch.path() / "example.sh";
    // mpirun (docs/expert-parallel.md) refuses to run as root unless told it may, and CI runs
    // as root; for any other user the two variables change nothing.
    std::ofstream(script) << "set -euo pipefail\n"
                          << "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
                          << block.script;
    const auto r = testing::RunCommand("cd " + (scratch.path() / "repo").string() + " && bash " +
                                       script.string());
    EXPECT_EQ(r.exit_code, 0) << "example at " << GetParam() << ":" << block.line << " failed:\n"
                              << block.script << "\nstderr:\n"
                              << r.err.substr(r.err.size() > 4000 ? r.err.size() - 4000 : 0);
  }
  if (!needs_shared.empty()) MOEX_SKIP_WITHOUT_SHARED_DATA("examples at" + needs_shared);
}

// The documents with runnable blocks (one test each).
std::vector<std::string> DocNames() {
  std::vector<std::string> names;
  for (const fs::path& f : DocFiles())
    if (!RunnableBlocks(f).empty()) names.push_back(fs::relative(f, testing::SourceDir()).string());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Docs, DocsExamples, ::testing::ValuesIn(DocNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

// The extractor itself, on a hand-written document.
TEST(DocsExamplesConvention, OnlyShBlocksRunAndNotRunSkipsOneCommand) {
  testing::TempDir dir;
  std::ofstream(dir / "x.md") << "# t\n```\nnot run\n```\n```sh\necho a \\\n  b\n"
                              << "# not-run: slow\nsleep 100 \\\n  --long\necho c\n```\n"
                              << "```text\nno\n```\n";
  const auto blocks = RunnableBlocks(dir / "x.md");
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].line, 5);
  EXPECT_EQ(blocks[0].script, "echo a \\\n  b\necho c\n");
  ASSERT_EQ(blocks[0].skipped.size(), 1u);
  EXPECT_EQ(blocks[0].skipped[0], "line 9: slow");
}

}  // namespace
}  // namespace moex

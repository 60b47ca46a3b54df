// Prompt sets: each supported format by hand-written example, auto-detection, and errors
// naming file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/prompt_set.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

std::string Write(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return dir / name;
}

TEST(PromptSet, ReadsEveryFormatAndDetectsIt) {
  testing::TempDir dir;
  const auto share = LoadPromptSet(Write(
      dir, "s.json",
      R"([{"id":"a","conversations":[{"from":"gpt","value":"hi"},{"from":"human","value":"first"},{"from":"human","value":"second"}]},
          {"id":"b","conversations":[{"from":"gpt","value":"only a bot"}]}])"));
  ASSERT_EQ(share.size(), 1u);
  EXPECT_EQ(share[0].id, "a");
  EXPECT_EQ(share[0].text, "first");

  const auto mt = LoadPromptSet(
      Write(dir, "m.jsonl",
            "{\"question_id\": 81, \"category\": \"writing\", \"turns\": [\"one\", \"two\"]}\n\n"
            "{\"question_id\": 82, \"category\": \"math\", \"turns\": [\"three\"]}\n"));
  ASSERT_EQ(mt.size(), 2u);
  EXPECT_EQ(mt[1].text, "three");
  EXPECT_EQ(mt[1].category, "math");
  EXPECT_EQ(mt[0].id, "81");

  const auto gsm =
      LoadPromptSet(Write(dir, "g.jsonl", "{\"question\": \"q1\", \"answer\": \"a\"}\n"));
  ASSERT_EQ(gsm.size(), 1u);
  EXPECT_EQ(gsm[0].text, "q1");

  const auto text = LoadPromptSet(Write(dir, "t.txt", "line one\r\n\n  \nline two\n"));
  ASSERT_EQ(text.size(), 2u);
  EXPECT_EQ(text[0].text, "line one");
  EXPECT_EQ(text[1].id, "4");
}

TEST(PromptSet, MalformedInputNamesFileAndLine) {
  testing::TempDir dir;
  auto error = [](const std::string& path, const std::string& format) -> std::string {
    try {
      LoadPromptSet(path, format);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string bad_line = Write(dir, "b.jsonl", "{\"question\": \"ok\"}\n{\"question\": 5}\n");
  EXPECT_NE(error(bad_line, "auto").find("b.jsonl:2"), std::string::npos);
  EXPECT_NE(error(Write(dir, "c.jsonl", "{\"question\": \"ok\"}\n{broken\n"), "gsm8k")
                .find(":2: not valid JSON"),
            std::string::npos);
  EXPECT_NE(error(Write(dir, "d.json", "[{\"x\": 1}]"), "sharegpt").find("conversations"),
            std::string::npos);
  EXPECT_NE(error(Write(dir, "e.txt", "\n\n"), "auto").find("no prompts"), std::string::npos);
  EXPECT_NE(error(dir / "missing", "auto").find("cannot open"), std::string::npos);
  EXPECT_NE(error(Write(dir, "f.txt", "x"), "csv").find("unknown prompt format"),
            std::string::npos);
}

TEST(PromptSet, SharedPromptSetsLoad) {
  const std::filesystem::path prompts = testing::SharedDataDir() / "prompts";
  if (!std::filesystem::exists(prompts)) MOEX_SKIP_WITHOUT_SHARED_DATA(prompts);
  EXPECT_EQ(LoadPromptSet(prompts / "sharegpt_v3_filtered_500.json").size(), 500u);
  EXPECT_EQ(LoadPromptSet(prompts / "mt_bench_question.jsonl").size(), 80u);
  EXPECT_EQ(LoadPromptSet(prompts / "gsm8k_test.jsonl").size(), 1319u);
}

}  // namespace
}  // namespace moex

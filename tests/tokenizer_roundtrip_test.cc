// Round trip on real text: decode(encode(s)) == s for every corpus file and every tokenizer in
// shared/data/tokenizers, whole-file and line by line; and streaming decode gives the same text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "text/tokenizer.h"
#include "text/tokenizer_stream.h"
#include "text/tokenizer_utf8.h"

#include "support/shared_data.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
const auto DataDir = testing::SharedDataDir;
using testing::ReadFile;

class RoundTripTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RoundTripTest, CorpusFilesRoundTrip) {
  const fs::path path = DataDir() / "tokenizers" / GetParam();
  if (!fs::exists(path)) MOEX_SKIP_WITHOUT_SHARED_DATA(path);
  const auto tok = LoadTokenizer(path.string());
  const bool sp = tok->kind() == TokenizerKind::kSentencePieceBpe;
  size_t files = 0, lines = 0;
  for (const auto& entry : fs::directory_iterator(DataDir() / "corpus")) {
    const std::string text = ReadFile(entry.path());
    ASSERT_TRUE(IsValidUtf8(text)) << entry.path();
    // SentencePiece would read "<s>" in running text as the BOS token; round trips hold for
    // plain text, so special-token parsing is off there.
    const auto ids = tok->Encode(text, false, !sp);
    ASSERT_EQ(tok->Decode(ids), text) << entry.path();
    ++files;
    // Lines: many short inputs exercise the leading-space rules.
    std::istringstream in(text);
    std::string line;
    int n = 0;
    while (std::getline(in, line) && n++ < 300) {
      const auto line_ids = tok->Encode(line, false, !sp);
      ASSERT_EQ(tok->Decode(line_ids), line) << entry.path() << " line " << n;
      ++lines;
    }
    // Streaming: token by token, only valid UTF-8 comes out, and it adds up to the whole.
    StreamDecoder stream(*tok);
    std::string streamed;
    const size_t limit = std::min<size_t>(ids.size(), 20000);
    for (size_t i = 0; i < limit; ++i) {
      const std::string piece = stream.Push(ids[i]);
      ASSERT_TRUE(IsValidUtf8(piece)) << "token " << i;
      streamed += piece;
    }
    streamed += stream.Flush();
    ASSERT_EQ(streamed, tok->Decode(std::span<const int32_t>(ids.data(), limit)));
  }
  EXPECT_GT(files, 0u);
  RecordProperty("lines", static_cast<int>(lines));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RoundTripTest,
                         ::testing::Values("olmoe-gpt-neox-olmo-dolma-v1_5.tokenizer.json",
                                           "qwen3.tokenizer.json", "deepseek_v3.tokenizer.json",
                                           "mixtral-8x7b.tokenizer.model"),
                         [](const auto& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find_first_of("-_."));
                         });

}  // namespace
}  // namespace moex

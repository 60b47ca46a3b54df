// Golden vectors: llama.cpp's tokenizer test strings (.inp) and the ids HF tokenizers gives for
// them (.out), for every vocabulary in shared/data/gguf-vocab, tokenized from the GGUF alone;
// and a few fixed vectors for the tokenizer.json / tokenizer.model files, taken from the
// reference implementations (see tokenizer_reference_test.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "text/tokenizer.h"

#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
const auto DataDir = testing::SharedDataDir;
using testing::ReadFile;

std::vector<std::string> SplitOn(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(sep, pos);
    if (hit == std::string::npos) break;
    out.push_back(s.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

// Encodes every llama.cpp test string of `inp` and compares with the ids in `out`; returns
// how many agree (every disagreement is a failure).
size_t CheckVectors(const Tokenizer& tok, const fs::path& inp, const fs::path& out) {
  auto inputs = SplitOn(ReadFile(inp), "\n__ggml_vocab_test__\n");
  auto expected = SplitOn(ReadFile(out), "\n");
  // Both files end with a separator.
  EXPECT_FALSE(inputs.empty()) << inp;
  if (inputs.empty()) return 0;
  if (inputs.back().empty()) inputs.pop_back();
  if (expected.size() > inputs.size() && expected.back().empty()) expected.pop_back();
  EXPECT_EQ(inputs.size(), expected.size()) << inp;
  if (inputs.size() != expected.size()) return 0;
  size_t pass = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> want;
    std::istringstream ids(expected[i]);
    for (int32_t id; ids >> id;) want.push_back(id);
    const auto got = tok.Encode(inputs[i], false);
    if (got == want) {
      ++pass;
    } else {
      std::ostringstream g;
      for (int32_t id : got) g << " " << id;
      ADD_FAILURE() << inp.filename() << " case " << i << " '" << inputs[i]
                    << "'\n  got: " << g.str() << "\n want: " << expected[i];
    }
  }
  std::printf("[ golden ] %s: %zu / %zu vectors pass\n", inp.filename().c_str(), pass,
              inputs.size());
  return pass;
}

// Checks every .gguf in `dir` against its .inp/.out vectors; returns how many vocabularies.
int CheckGgufVocabVectors(const fs::path& dir) {
  int vocabs = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".gguf") continue;
    const auto tok = LoadTokenizer(entry.path().string());
    EXPECT_GT(tok->vocab_size(), 1000) << entry.path();
    const fs::path inp = entry.path().string() + ".inp";
    const fs::path out = entry.path().string() + ".out";
    if (!fs::exists(inp) || !fs::exists(out)) {
      // No vectors (gpt-neox): it must still load and round-trip.
      const std::string text = "Hello world, this is\n\n  a test 12345 ½ 🦙";
      EXPECT_EQ(tok->Decode(tok->Encode(text, false)), text) << entry.path();
    } else {
      CheckVectors(*tok, inp, out);
    }
    ++vocabs;
  }
  return vocabs;
}

TEST(TokenizerGoldenTest, GgufVocabVectors) {
  const fs::path dir = DataDir() / "gguf-vocab";
  if (!fs::exists(dir)) MOEX_SKIP_WITHOUT_SHARED_DATA(dir);
  EXPECT_GE(CheckGgufVocabVectors(dir), 3);
}

// Vocabularies kept in the repository (tests/data/README.md says where they come from).
TEST(TokenizerGoldenTest, RepositoryGgufVocabVectors) {
  EXPECT_GE(CheckGgufVocabVectors(testing::SourceDir() / "tests/data/gguf-vocab"), 1);
}

// Qwen3.5's tokenizer.json form: Qwen3's vocabulary and merges with Qwen3.5's split regex
// (marks join letters) and no normalizer, as that release ships it, checked against the
// qwen35 vectors.
TEST(TokenizerGoldenTest, Qwen35TokenizerJsonForm) {
  const fs::path qwen3 = DataDir() / "tokenizers/qwen3.tokenizer.json";
  if (!fs::exists(qwen3)) MOEX_SKIP_WITHOUT_SHARED_DATA(qwen3);
  auto j = nlohmann::json::parse(ReadFile(qwen3));
  j["normalizer"] = nullptr;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
      "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  testing::TempDir dir;
  std::ofstream(dir / "tokenizer.json") << j.dump();
  const auto tok = LoadTokenizer(dir / "tokenizer.json");
  const fs::path vectors = testing::SourceDir() / "tests/data/gguf-vocab/ggml-vocab-qwen35.gguf";
  EXPECT_EQ(CheckVectors(*tok, vectors.string() + ".inp", vectors.string() + ".out"), 50u);
}

struct Fixed {
  const char* file;
  const char* text;
  std::vector<int32_t> ids;
};

TEST(TokenizerGoldenTest, FixedVectors) {
  // From @huggingface/tokenizers and SentencePiece (see the reference test).
  const std::vector<Fixed> cases = {
      {"olmoe-gpt-neox-olmo-dolma-v1_5.tokenizer.json",
       "Hello World  <|im_end|> 123456 你好 \n\n  x",
       {12092, 3645, 50276, 29, 93, 303, 64, 423, 49651, 1249, 1706, 3208, 209, 24553, 34439, 15267,
        50276, 89}},
      {"qwen3.tokenizer.json",
       "Hello World  <|im_end|> 123456 你好 \n\n  x",
       {9707, 4337, 256, 151645, 220, 16, 17, 18, 19, 20, 21, 220, 108386, 4710, 220, 856}},
      {"deepseek_v3.tokenizer.json",
       "Hello World  <|im_end|> 123456 你好 \n\n  x",
       {19923, 4495, 223, 818, 94, 328, 42616, 94, 32, 223, 6895, 18009, 223, 30594, 1004, 223,
        1527}},
      {"mixtral-8x7b.tokenizer.model",
       "Hello World  123 你好 \n\n  x",
       {22557, 3304, 259, 28740, 28750, 28770, 28705, 29383, 29530, 28705, 13, 13, 28705, 1318}},
  };
  for (const Fixed& c : cases) {
    const fs::path path = DataDir() / "tokenizers" / c.file;
    if (!fs::exists(path)) MOEX_SKIP_WITHOUT_SHARED_DATA(path);
    const auto tok = LoadTokenizer(path.string());
    EXPECT_EQ(tok->Encode(c.text, false), c.ids) << c.file;
    EXPECT_EQ(tok->Decode(c.ids), c.text) << c.file;
  }
}

}  // namespace
}  // namespace moex

// Fuzzing: random bytes, invalid UTF-8, long runs and special-token fragments never crash or
// hang the tokenizers; valid UTF-8 round-trips, and decoding any ids gives valid UTF-8.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>

#include "text/tokenizer.h"
#include "text/tokenizer_nfc.h"
#include "text/tokenizer_stream.h"
#include "text/tokenizer_utf8.h"

#include "support/shared_data.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
const auto DataDir = testing::SharedDataDir;

std::string RandomText(std::mt19937& rng) {
  static const char* kPieces[] = {" ",
                                  "  ",
                                  "\n",
                                  "\r\n",
                                  "\t",
                                  "a",
                                  "The",
                                  " the",
                                  "'s",
                                  "'LL",
                                  "123",
                                  "4567",
                                  "½",
                                  "é",
                                  "e\xCC\x81",
                                  "\xCC\x81",
                                  "你好",
                                  "日本語",
                                  "ｶﾀｶﾅ",
                                  "한국어",
                                  "\xE1\x84\x80\xE1\x85\xA1",
                                  "🦙",
                                  "👩‍👩‍👧",
                                  "\xEF\xBB\xBF",
                                  "<|im_end|>",
                                  "<|endoftext|>",
                                  "<s>",
                                  "</s>",
                                  "<｜end▁of▁sentence｜>",
                                  "▁",
                                  "\xE2\x96",
                                  "\xF0\x9F",
                                  "\xC3",
                                  "\x80",
                                  "\xFF",
                                  "\xED\xA0\x80",
                                  "\xC0\xAF",
                                  "\x00",
                                  "{",
                                  "}",
                                  "```",
                                  "//",
                                  "\\",
                                  "$",
                                  "...",
                                  "—",
                                  "\u3000",
                                  "\u00a0",
                                  "\u2028",
                                  "\u0085",
                                  "ſ",
                                  "K"};
  std::uniform_int_distribution<int> kind(0, 9);
  std::string s;
  const int parts = std::uniform_int_distribution<int>(0, 40)(rng);
  for (int i = 0; i < parts; ++i) {
    const int k = kind(rng);
    if (k < 6) {
      s += kPieces[rng() % (sizeof(kPieces) / sizeof(kPieces[0]))];
    } else if (k < 8) {
      s.push_back(static_cast<char>(rng() & 0xFF));  // any byte
    } else if (k == 8) {
      s.append(rng() % 200, " \n\t"[rng() % 3]);  // whitespace run
    } else {
      std::string cp;
      AppendUtf8(static_cast<char32_t>(rng() % 0x30000), &cp);  // may be a surrogate: invalid
      s += cp;
    }
  }
  return s;
}

// What a lossless round trip gives back: NFC text for NFC tokenizers; SentencePiece cannot tell
// a literal "▁" from a space.
std::string Expected(const Tokenizer& tok, const std::string& text) {
  std::string s = tok.spec().nfc ? Nfc(text) : text;
  if (tok.kind() == TokenizerKind::kSentencePieceBpe) {
    for (size_t p; (p = s.find("\xE2\x96\x81")) != std::string::npos;) s.replace(p, 3, " ");
  }
  return s;
}

class FuzzTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FuzzTest, RandomInputs) {
  const fs::path path = DataDir() / "tokenizers" / GetParam();
  if (!fs::exists(path)) MOEX_SKIP_WITHOUT_SHARED_DATA(path);
  const auto tok = LoadTokenizer(path.string());
  std::mt19937 rng(1234);
  const auto start = std::chrono::steady_clock::now();
  int valid = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string text = RandomText(rng);
    for (bool special : {true, false}) {
      const auto ids = tok->Encode(text, true, special);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->vocab_size());
      const std::string back = tok->Decode(ids, true);
      ASSERT_TRUE(IsValidUtf8(back));
      if (IsValidUtf8(text) && !special) {
        ++valid;
        ASSERT_EQ(back, Expected(*tok, text)) << "iteration " << iter;
      }
    }
    // Random ids decode to valid UTF-8, streamed or not.
    std::vector<int32_t> ids(rng() % 30);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % tok->vocab_size());
    ASSERT_TRUE(IsValidUtf8(tok->Decode(ids)));
    StreamDecoder stream(*tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Push(id);
    streamed += stream.Flush();
    ASSERT_TRUE(IsValidUtf8(streamed));
  }
  EXPECT_GT(valid, 100);
  // Pathological lengths stay linear-ish: a long run of one character and a long word.
  for (const std::string& s :
       {std::string(200000, ' '), std::string(200000, 'a'), std::string(50000, '\n'), [] {
          std::string cjk;
          for (int i = 0; i < 30000; ++i) cjk += "语";
          return cjk;
        }()}) {
    const auto ids = tok->Encode(s, false, false);
    ASSERT_EQ(tok->Decode(ids), s);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0) << "fuzzing took too long: a tokenizer path may be quadratic";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, FuzzTest,
                         ::testing::Values("olmoe-gpt-neox-olmo-dolma-v1_5.tokenizer.json",
                                           "qwen3.tokenizer.json", "deepseek_v3.tokenizer.json",
                                           "mixtral-8x7b.tokenizer.model"),
                         [](const auto& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find_first_of("-_."));
                         });

}  // namespace
}  // namespace moex

// Unit tests of the tokenizer building blocks: UTF-8 helpers, NFC, regex translation and
// splitting, the BPE merge order, added-token matching, streaming decode, and loading a
// checkpoint directory.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"
#include "text/byte_tokenizer_json.h"
#include "text/tokenizer.h"
#include "text/tokenizer_added.h"
#include "text/tokenizer_bpe.h"
#include "text/tokenizer_nfc.h"
#include "text/tokenizer_regex.h"
#include "text/tokenizer_stream.h"
#include "text/tokenizer_utf8.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

TEST(Utf8Test, ValidationAndSanitizing) {
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("é 你好 🦙"));
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE4\xBD"));          // truncated
  // One U+FFFD per maximal invalid subpart, as Python and Rust do.
  EXPECT_EQ(SanitizeUtf8("a\xE4\xBD"
                         "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(SanitizeUtf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\xA6"), "\xEF\xBF\xBD");
}

TEST(Utf8Test, CompletePrefixHoldsOnlyUnfinishedCharacters) {
  EXPECT_EQ(Utf8CompletePrefix("abc"), 3u);
  EXPECT_EQ(Utf8CompletePrefix("ab\xE4\xBD"), 2u);      // 你 missing its last byte
  EXPECT_EQ(Utf8CompletePrefix("ab\xF0\x9F\xA6"), 2u);  // 🦙 missing one byte
  EXPECT_EQ(Utf8CompletePrefix("ab\xF0\x9F\xA6\x99"), 6u);
  EXPECT_EQ(Utf8CompletePrefix("ab\xFF"), 3u);      // invalid: nothing to wait for
  EXPECT_EQ(Utf8CompletePrefix("ab\xE0\x80"), 4u);  // can never become valid
}

TEST(NfcTest, ComposesReordersAndKeepsStableText) {
  std::string out;
  EXPECT_FALSE(NfcIfNeeded("already NFC: é 你好", &out));
  EXPECT_EQ(Nfc("e\xCC\x81"), "\xC3\xA9");                     // e + acute -> é
  EXPECT_EQ(Nfc("\xE2\x84\xAB"), "\xC3\x85");                  // Angstrom sign -> Å
  EXPECT_EQ(Nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // Hangul jamo -> 가
  // Combining marks are reordered by class: dot below (220) before acute (230).
  EXPECT_EQ(Nfc("a\xCC\x81\xCC\xA3"), Nfc("a\xCC\xA3\xCC\x81"));
  EXPECT_EQ(Nfc("x\xE1\xBA\xA1\xCC\x81y"), "x\xE1\xBA\xA1\xCC\x81y");  // ạ + acute stays
  EXPECT_EQ(Nfc("\xE1\xBD\xBD"), "\xCF\x8E");  // U+1F7D (singleton) -> U+03CE
}

TEST(RegexTest, OnigurumaWhitespaceAndIsolatedSplits) {
  // \s means Unicode White_Space (U+0085 yes, U+180E no), inside and outside classes.
  const std::string t = TranslateOnigurumaPattern("\\s+|[^\\s\\p{L}]");
  EXPECT_NE(t.find("\\x{85}"), std::string::npos);
  EXPECT_EQ(t.find("\\s"), std::string::npos);
  SplitRegex re("\\p{N}{1,3}");
  const std::string text = "ab12345c";
  std::vector<TextSpan> spans;
  re.Split(text, {0, text.size()}, &spans);
  std::vector<std::string> parts;
  for (const TextSpan& s : spans) parts.push_back(text.substr(s.begin, s.end - s.begin));
  EXPECT_EQ(parts, (std::vector<std::string>{"ab", "123", "45", "c"}));
  EXPECT_THROW(SplitRegex("[unclosed"), Error);
}

// GGUF's "glm4" split (llama.cpp's CHATGLM4): case-insensitive contractions, a letter run
// with one leading non-letter, digits in runs of up to three, punctuation with a leading
// space, newlines on their own; "chatglm-bpe" is the same.
TEST(RegexTest, Glm4PreTokenizerSplits) {
  const std::vector<std::string> patterns = PreTokenizerPatterns("glm4");
  ASSERT_EQ(patterns.size(), 1u);
  EXPECT_EQ(PreTokenizerPatterns("chatglm-bpe"), patterns);
  SplitRegex re(patterns[0]);
  const std::string text = "I'LL pay $1234567 now!!\n\n  ok";
  std::vector<TextSpan> spans;
  re.Split(text, {0, text.size()}, &spans);
  std::vector<std::string> parts;
  for (const TextSpan& s : spans) parts.push_back(text.substr(s.begin, s.end - s.begin));
  EXPECT_EQ(parts, (std::vector<std::string>{"I", "'LL", " pay", " $", "123", "456", "7", " now",
                                             "!!\n\n", " ", " ok"}));
}

TEST(BpeTest, LowestRankFirstThenLeftmost) {
  // Symbols: a=0 b=1 ab=2 bb=3 abb=4. Ranks: (b,b)=0 beats (a,b)=1.
  BpeMerges m;
  m.Add(1, 1, 3, 0);
  m.Add(0, 1, 2, 1);
  m.Add(0, 3, 4, 2);
  std::vector<int32_t> s = {0, 1, 1};
  m.Apply(&s);
  EXPECT_EQ(s, (std::vector<int32_t>{4}));
  // Equal ranks: the leftmost pair merges first ("bbb" -> "bb" + "b").
  s = {1, 1, 1};
  m.Apply(&s);
  EXPECT_EQ(s, (std::vector<int32_t>{3, 1}));
  // The heap path (long words) gives the same as the quadratic one.
  std::vector<int32_t> long_word;
  for (int i = 0; i < 100; ++i) long_word.push_back(i % 3 == 0 ? 0 : 1);
  std::vector<int32_t> expected;
  for (int i = 0; i < 33; ++i) expected.push_back(4);
  expected.push_back(0);
  m.Apply(&long_word);
  EXPECT_EQ(long_word, expected);
}

TEST(AddedTokenTest, LongestMatchAndStrip) {
  AddedToken a{"<|im", 5}, b{"<|im_end|>", 6}, c{"<mask>", 7};
  c.lstrip = true;
  c.rstrip = true;
  AddedTokenMatcher m({&a, &b, &c});
  std::vector<AddedSplit> out;
  const std::string text = "x<|im_end|>y  <mask>  z";
  m.Split(text, &out);
  std::vector<std::string> parts;
  for (const AddedSplit& s : out) {
    parts.push_back(s.token >= 0 ? "#" + std::to_string(s.token)
                                 : text.substr(s.begin, s.end - s.begin));
  }
  EXPECT_EQ(parts, (std::vector<std::string>{"x", "#6", "y", "#7", "z"}));
}

// A tiny byte-level tokenizer: bytes of "ab" plus a merge, and one special token.
std::unique_ptr<Tokenizer> TinyByteLevel() {
  TokenizerSpec spec;
  spec.source = "tiny";
  spec.kind = TokenizerKind::kByteLevelBpe;
  // The GPT-2 alphabet: printable ASCII maps to itself, space to U+0120 (Ġ).
  for (int b = 0; b < 256; ++b) {
    std::string piece;
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    int next = 0;
    for (int k = 0; k < b; ++k) {
      next += !((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || k >= 174);
    }
    AppendUtf8(printable ? b : 256 + next, &piece);
    spec.vocab.push_back(piece);
  }
  spec.vocab.push_back("ab");
  spec.merges.push_back({"a", "b"});
  spec.split_patterns = {
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"};
  spec.added_tokens.push_back({"<eos>", 257, true});
  spec.eos_ids = {257};
  return std::make_unique<Tokenizer>(std::move(spec));
}

TEST(TokenizerTest, TinyByteLevelEncodeDecode) {
  const auto tok = TinyByteLevel();
  EXPECT_EQ(tok->Encode("ab<eos>", false), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(tok->Encode("ab<eos>", false, false).size(), 6u);
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{256, 257}), "ab<eos>");
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{256, 257}, true), "ab");
  EXPECT_TRUE(tok->IsEos(257));
  EXPECT_TRUE(tok->IsSpecial(257));
  EXPECT_EQ(tok->TokenId("ab"), 256);
  EXPECT_FALSE(tok->TokenId("zz").has_value());
  // Invalid UTF-8 input is replaced, never a crash.
  EXPECT_EQ(tok->Decode(tok->Encode("a\xFF", false)), "a\xEF\xBF\xBD");
}

TEST(TokenizerTest, StreamDecoderHoldsPartialCharacters) {
  const auto tok = TinyByteLevel();
  // "你" is E4 BD A0: one byte token at a time.
  StreamDecoder s(*tok);
  EXPECT_EQ(s.Push(0xE4), "");
  EXPECT_EQ(s.Push(0xBD), "");
  EXPECT_EQ(s.Push(0xA0), "你");
  EXPECT_EQ(s.Push('a'), "a");
  EXPECT_EQ(s.Push(0xF0), "");
  EXPECT_EQ(s.Push('b'),
            "\xEF\xBF\xBD"
            "b");  // the 4-byte sequence was broken
  EXPECT_EQ(s.Push(0xE4), "");
  EXPECT_EQ(s.Flush(), "\xEF\xBF\xBD");
}

// tokenizer_config.json fields of the wrong type are named (chat_template was reported
// missing); a checkpoint saved by newer transformers keeps its template in
// chat_template.jinja; a FIFO or device in place of tokenizer.json is refused at once.
TEST(TokenizerTest, ConfigFieldsAreCheckedAndTheJinjaFileIsRead) {
  testing::TempDir dir;
  const ByteTokenizerFiles files = ByteLevelTokenizerFor(300, 1, {2});
  std::ofstream(dir / "tokenizer.json") << files.tokenizer.dump();
  auto load_error = [&](const nlohmann::json& config) -> std::string {
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    try {
      LoadTokenizer(dir.path().string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  nlohmann::json config = files.config;
  config["chat_template"] = 5;
  EXPECT_NE(load_error(config).find("chat_template must be a string or a list"),
            std::string::npos)
      << load_error(config);
  config["chat_template"] = nlohmann::json::array({{{"name", "default"}}});
  EXPECT_NE(load_error(config).find("lacks a string name or template"), std::string::npos);
  config = files.config;
  config["add_bos_token"] = "yes";
  EXPECT_NE(load_error(config).find("add_bos_token must be true or false"), std::string::npos);
  config = files.config;
  config["eos_token"] = 7;
  EXPECT_NE(load_error(config).find("eos_token must be a string"), std::string::npos);

  config = files.config;
  config.erase("chat_template");
  EXPECT_EQ(load_error(config), "");
  EXPECT_TRUE(LoadTokenizer(dir.path().string())->chat_template().empty());
  std::ofstream(dir / "chat_template.jinja") << "{{ messages[0]['content'] }}";
  EXPECT_EQ(LoadTokenizer(dir.path().string())->chat_template(), "{{ messages[0]['content'] }}");

  fs::remove(dir / "tokenizer.json");
  fs::create_symlink("/dev/zero", dir / "tokenizer.json");
  EXPECT_NE(load_error(config).find("tokenizer.json is a character device"), std::string::npos)
      << load_error(config);
}

// Found by tokenizer_json_fuzzer (UBSan): a vocabulary id written as a huge float was
// converted to an integer, which is undefined; ids must be integers in 0..2^24.
TEST(TokenizerTest, VocabularyIdsMustBeSmallIntegers) {
  for (const char* id : {"4.6e87", "1.5", "-1", "16777216", "18446744073709551615"}) {
    const std::string text = std::string(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": )") +
                             id + R"(}, "merges": []}})";
    try {
      ParseTokenizerJson(text, "", "t.json");
      ADD_FAILURE() << id << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad id"), std::string::npos) << id << ": " << e.what();
    }
  }
}

TEST(TokenizerTest, LoadsCheckpointDirectory) {
  const fs::path data = testing::SharedDataDir() / "tokenizers";
  if (!fs::exists(data)) MOEX_SKIP_WITHOUT_SHARED_DATA(data);
  const fs::path dir = fs::temp_directory_path() / ("moex-tok-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(data / "qwen3.tokenizer.json", dir / "tokenizer.json");
  fs::copy_file(data / "qwen3.tokenizer_config.json", dir / "tokenizer_config.json");
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [151645, 151643]})";
  const auto tok = LoadTokenizer(dir.string());
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{151645, 151643}));
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_FALSE(tok->add_bos_default());
  EXPECT_FALSE(tok->chat_template().empty());
  EXPECT_EQ(tok->TokenId("<|im_end|>"), 151645);
  fs::remove_all(dir);
  EXPECT_THROW(LoadTokenizer("/nonexistent/tokenizer.json"), Error);

  const auto ds = LoadTokenizer((data / "deepseek_v3.tokenizer.json").string());
  EXPECT_EQ(ds->bos_id(), 0);
  EXPECT_TRUE(ds->add_bos_default());
  EXPECT_EQ(ds->Encode("Hi", true).front(), 0);
  const auto mixtral = LoadTokenizer((data / "mixtral-8x7b.tokenizer.model").string());
  EXPECT_EQ(mixtral->bos_id(), 1);
  EXPECT_EQ(mixtral->eos_ids(), (std::vector<int32_t>{2}));
  EXPECT_EQ(mixtral->Encode("Hello", true), (std::vector<int32_t>{1, 22557}));
  // The dummy prefix goes on the first span and after each special token (HF legacy).
  EXPECT_EQ(mixtral->Encode("<s>[INST] Hi [/INST]", false),
            (std::vector<int32_t>{1, 733, 16289, 28793, 15359, 733, 28748, 16289, 28793}));
}

}  // namespace
}  // namespace moex

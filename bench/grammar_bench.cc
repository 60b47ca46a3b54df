// Cost of grammar-constrained decoding per token: GrammarMatcher::FillMask (cold: the first
// visit of a state walks the token trie; warm: the state's mask is cached) and AcceptToken,
// while generating the arguments of a tool call (a JSON-schema grammar) with a synthetic
// byte-level vocabulary of 50k and 200k tokens. One thread, CPU time.
//
//   grammar_bench [--json] [--vocab N]...
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/grammar.h"
#include "text/grammar_matcher.h"
#include "text/tokenizer_utf8.h"

namespace {

using namespace moex;

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A vocabulary shaped like a byte-level BPE one: the 256 bytes, English words and word pieces
// with and without a leading space (and capitalised), numbers, punctuation and JSON pieces,
// whitespace runs, accented letters, CJK characters, emoji, and pieces that cut multi-byte
// characters. Deterministic for a given size.
std::vector<std::string> Vocabulary(size_t size) {
  std::vector<std::string> v;
  std::unordered_set<std::string> seen;
  auto add = [&](const std::string& t) {
    if (v.size() < size && !t.empty() && seen.insert(t).second) v.push_back(t);
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, char(b)));
  for (const char* t :
       {"{\"",    "\":",   "\",",   "\"}",  "\"]",  "[{",   "}]",     "},",   "\": \"",
        "\", \"", "\":\"", "\",\"", "{\n",  "\n}",  "\n  ", "\n    ", "  ",   "    ",
        "\t",     "\": [", "\": {", "\"},", "null", "true", "false",  ", ",   ": ",
        "\\n",    "\\\"",  "\\u00", "...",  "--",   "==",   "->",     "()",   "[]",
        "{}",     "</",    "/>",    "://",  "www",  ".com", "http",   "https"}) {
    add(t);
  }
  for (int n = 0; n < 1000; ++n) {
    add(std::to_string(n));
    add(" " + std::to_string(n));
  }
  const char* words[] = {
      "the",     "of",         "and",     "to",         "in",        "is",      "that",
      "for",     "it",         "as",      "was",        "with",      "be",      "by",
      "on",      "not",        "he",      "this",       "are",       "or",      "his",
      "from",    "at",         "which",   "but",        "have",      "an",      "had",
      "they",    "you",        "were",    "their",      "one",       "all",     "we",
      "can",     "her",        "has",     "there",      "been",      "if",      "more",
      "when",    "will",       "would",   "who",        "so",        "no",      "location",
      "unit",    "days",       "filters", "conditions", "notes",     "weather", "forecast",
      "celsius", "fahrenheit", "rain",    "snow",       "sun",       "wind",    "temperature",
      "city",    "Paris",      "London",  "Tokyo",      "New",       "York",    "include",
      "hourly",  "min",        "temp",    "query",      "name",      "value",   "type",
      "string",  "number",     "object",  "array",      "id",        "user",    "data",
      "result",  "error",      "message", "function",   "arguments", "tool",    "call",
      "content", "role"};
  for (const char* w : words) {
    std::string cap = w;
    cap[0] = char(std::toupper(uint8_t(cap[0])));
    for (const std::string& t :
         {std::string(w), " " + std::string(w), cap, " " + cap, "_" + std::string(w),
          "\"" + std::string(w), std::string(w) + "\""}) {
      add(t);
    }
  }
  for (const char* t :
       {"é",    "è",   "à", "ü", "ö", "ñ", "ç", "ß", "€",    "£",        "°",        "—",
        "–",    "…",   "“", "”", "’", "😀", "👍", "🎉", "\xC3", "\xE2\x80", "\xF0\x9F", "\xF0\x9F\x98",
        "\x80", "\xA9"}) {
    add(t);
  }
  std::mt19937 rng(42);
  // CJK characters and pairs (a 200k vocabulary has tens of thousands).
  for (char32_t c = 0x4E00; c < 0x4E00 + 6000 && v.size() < size / 8; ++c) {
    std::string s;
    AppendUtf8(c, &s);
    add(s);
    if (c % 3 == 0) {
      std::string pair = s;
      AppendUtf8(0x4E00 + rng() % 6000, &pair);
      add(pair);
    }
  }
  // Word pieces from syllables: 2-12 bytes, often with a leading space.
  const char* onsets[] = {"b", "c", "d", "f", "g",  "h",  "j",  "k",  "l",  "m",  "n",  "p", "r",
                          "s", "t", "v", "w", "st", "tr", "pl", "ch", "sh", "th", "qu", "gr"};
  const char* vowels[] = {"a", "e", "i", "o", "u", "ea", "ou", "io", "ai", "y"};
  const char* codas[] = {"", "", "n", "r", "s", "t", "l", "ng", "ck", "st", "nd", "tion", "ment"};
  while (v.size() < size) {
    std::string w;
    const int syllables = 1 + int(rng() % 3);
    for (int i = 0; i < syllables; ++i) {
      w += onsets[rng() % std::size(onsets)];
      w += vowels[rng() % std::size(vowels)];
      w += codas[rng() % std::size(codas)];
    }
    const uint32_t form = rng() % 4;
    if (form == 0) w[0] = char(std::toupper(uint8_t(w[0])));
    add(form <= 1 ? " " + w : w);
  }
  return v;
}

// Greedy longest-match tokenization (as good as BPE for the purpose: realistic token lengths).
std::vector<int32_t> Tokenize(const std::string& text, const std::vector<std::string>& vocab) {
  std::unordered_map<std::string, int32_t> ids;
  size_t longest = 0;
  for (size_t i = 0; i < vocab.size(); ++i) {
    ids.emplace(vocab[i], int32_t(i));
    longest = std::max(longest, vocab[i].size());
  }
  std::vector<int32_t> out;
  for (size_t pos = 0; pos < text.size();) {
    for (size_t len = std::min(longest, text.size() - pos); len > 0; --len) {
      auto it = ids.find(text.substr(pos, len));
      if (it != ids.end()) {
        out.push_back(it->second);
        pos += len;
        break;
      }
    }
  }
  return out;
}

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "location": {"type": "string", "description": "City and country"},
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "filters": {"type": "object", "properties": {
      "min_temp": {"type": "number"},
      "conditions": {"type": "array", "items": {"enum": ["rain", "snow", "sun", "wind"]},
                     "maxItems": 4}}},
    "notes": {"type": "array", "items": {"type": "string", "maxLength": 64}, "maxItems": 3},
    "include_hourly": {"type": "boolean"}
  }})";

std::vector<std::string> Instances() {
  return {
      R"({"location": "Paris, France", "unit": "celsius", "days": 3, "filters": {"min_temp": -2.5, "conditions": ["rain", "wind"]}, "notes": ["bring an umbrella", "café at 10"], "include_hourly": true})",
      "{\n  \"location\": \"New York, USA\",\n  \"unit\": \"fahrenheit\",\n  \"days\": 14,\n  "
      "\"filters\": {\n    \"min_temp\": 40,\n    \"conditions\": []\n  },\n  \"notes\": [],\n  "
      "\"include_hourly\": false\n}",
      R"({"location":"東京","unit":"celsius","days":7,"filters":{"min_temp":12.75,"conditions":["sun","snow","rain","wind"]},"notes":["the forecast for the weekend 😀","value 123"],"include_hourly":false})",
      R"({"location": "London", "unit": "celsius", "days": 1, "filters": {"min_temp": 0, "conditions": ["sun"]}, "notes": ["Tokyo trip — weather check", "the user asked for hourly data", "n/a"], "include_hourly": true})",
  };
}

struct Result {
  size_t vocab = 0, trie_nodes = 0, tokens = 0, cold_calls = 0, warm_calls = 0;
  double trie_ms = 0, compile_ms = 0, cold_us = 0, cold_max_us = 0, warm_us = 0, accept_us = 0,
         first_pass_us = 0, second_pass_us = 0;
};

Result Run(size_t vocab_size) {
  Result r;
  const std::vector<std::string> vocab = Vocabulary(vocab_size);
  r.vocab = vocab.size();
  double t0 = CpuSeconds();
  auto trie = std::make_shared<const TokenTrie>(vocab, std::vector<bool>());
  r.trie_ms = (CpuSeconds() - t0) * 1e3;
  r.trie_nodes = trie->num_nodes();
  t0 = CpuSeconds();
  auto grammar = std::make_shared<const Grammar>(
      JsonSchemaGrammar(nlohmann::ordered_json::parse(kSchema), JsonSchemaOptions{}));
  r.compile_ms = (CpuSeconds() - t0) * 1e3;

  std::vector<std::vector<int32_t>> sequences;
  for (const std::string& text : Instances()) sequences.push_back(Tokenize(text, vocab));
  GrammarMatcher matcher(grammar, trie);
  std::vector<uint64_t> mask;
  double cold_s = 0, warm_s = 0, accept_s = 0;
  for (int pass = 0; pass < 2; ++pass) {
    double pass_s = 0;
    size_t pass_tokens = 0;
    for (const auto& ids : sequences) {
      matcher.Reset();
      for (int32_t id : ids) {
        const uint64_t misses = matcher.stats().mask_misses;
        const double a = CpuSeconds();
        matcher.FillMask(&mask);
        const double b = CpuSeconds();
        Check(GrammarMatcher::Allows(mask, id), "grammar_bench: the mask refuses token ", id, " ('",
              vocab[id], "')");
        Check(matcher.AcceptToken(id), "grammar_bench: token refused");
        const double c = CpuSeconds();
        if (matcher.stats().mask_misses > misses) {
          cold_s += b - a;
          r.cold_max_us = std::max(r.cold_max_us, (b - a) * 1e6);
          ++r.cold_calls;
        } else {
          warm_s += b - a;
          ++r.warm_calls;
        }
        accept_s += c - b;
        pass_s += c - a;
        ++pass_tokens;
      }
      Check(matcher.IsComplete(), "grammar_bench: the instance does not complete the grammar");
    }
    (pass == 0 ? r.first_pass_us : r.second_pass_us) = pass_s * 1e6 / double(pass_tokens);
    r.tokens = pass_tokens;
  }
  r.cold_us = r.cold_calls ? cold_s * 1e6 / double(r.cold_calls) : 0;
  r.warm_us = r.warm_calls ? warm_s * 1e6 / double(r.warm_calls) : 0;
  r.accept_us = accept_s * 1e6 / double(2 * r.tokens);
  return r;
}

int Main(int argc, char** argv) {
  bool json = false;
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--vocab" && i + 1 < argc) {
      sizes.push_back(std::stoul(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: grammar_bench [--json] [--vocab N]...\n");
      return 2;
    }
  }
  if (sizes.empty()) sizes = {50000, 200000};
  if (json) std::cout << "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Result r = Run(sizes[i]);
    if (json) {
      std::printf(
          "%s{\"vocab\": %zu, \"trie_nodes\": %zu, \"trie_build_ms\": %.1f, \"compile_ms\": %.2f, "
          "\"tokens_per_pass\": %zu, \"mask_cold_calls\": %zu, \"mask_cold_us\": %.1f, "
          "\"mask_cold_max_us\": %.1f, \"mask_warm_calls\": %zu, \"mask_warm_us\": %.2f, "
          "\"accept_us\": %.2f, \"first_pass_us_per_token\": %.1f, "
          "\"warm_pass_us_per_token\": %.2f}",
          i ? ",\n " : "", r.vocab, r.trie_nodes, r.trie_ms, r.compile_ms, r.tokens, r.cold_calls,
          r.cold_us, r.cold_max_us, r.warm_calls, r.warm_us, r.accept_us, r.first_pass_us,
          r.second_pass_us);
    } else {
      std::printf(
          "vocab %6zu (trie %7zu nodes, built in %.0f ms; grammar %.2f ms): %zu tokens/pass\n"
          "  FillMask cold %7.1f us (%zu calls, max %.0f us)   warm %6.2f us (%zu calls)\n"
          "  AcceptToken %.2f us   per token: first pass %.1f us, warm pass %.2f us\n",
          r.vocab, r.trie_nodes, r.trie_ms, r.compile_ms, r.tokens, r.cold_us, r.cold_calls,
          r.cold_max_us, r.warm_us, r.warm_calls, r.accept_us, r.first_pass_us, r.second_pass_us);
    }
  }
  if (json) std::cout << "]\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "grammar_bench: %s\n", e.what());
    return 1;
  }
}

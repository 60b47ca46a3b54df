// libFuzzer target: the grammar front ends and the matcher. The input is read as GBNF, as a
// regular expression and, when it is JSON, as a JSON schema; a grammar that compiles runs in
// the matcher over the input's bytes and a tiny vocabulary. Invariants: every token the mask
// allows is accepted, every token it refuses is refused, and the matcher never dies
// (IsComplete or CanContinue) after accepting.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "text/grammar.h"
#include "text/grammar_matcher.h"

namespace {

using namespace moex;

std::shared_ptr<const TokenTrie> Vocabulary() {
  static const auto trie = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; b += 3) tokens.push_back(std::string(1, char(b)));
    for (const char* t : {"{\"",
                          "\":",
                          "\",",
                          "\"",
                          "}",
                          "]",
                          "[",
                          "a",
                          "ab",
                          "true",
                          "null",
                          "12",
                          "-",
                          " ",
                          "\n",
                          "\xC3",
                          "\xA9",
                          "\xC3\xA9",
                          "\xE2\x82\xAC",
                          "\xF0\x9F\x98\x80",
                          "\\",
                          "\\u00",
                          "x",
                          "<s>",
                          ""}) {
      tokens.push_back(t);
    }
    std::vector<bool> special(tokens.size(), false);
    special[tokens.size() - 2] = true;
    return std::make_shared<const TokenTrie>(tokens, special);
  }();
  return trie;
}

void Exercise(Grammar grammar, std::string_view input) {
  auto trie = Vocabulary();
  GrammarMatcherOptions options;
  options.max_stacks = 256;
  options.max_states = 4096;  // Rebuilds happen on long inputs too.
  GrammarMatcher m(std::make_shared<const Grammar>(std::move(grammar)), trie, options);
  std::vector<uint64_t> mask;
  for (size_t i = 0; i < input.size() && i < 128; ++i) {
    m.FillMask(&mask);
    for (int32_t id = 0; id < trie->vocab_size(); ++id) {
      GrammarMatcher probe = m;
      fuzz::Expect(probe.AcceptToken(id) == GrammarMatcher::Allows(mask, id),
                   "mask and AcceptToken disagree on token " + std::to_string(id));
    }
    if (!m.AcceptByte(uint8_t(input[i]))) break;
    fuzz::Expect(m.IsComplete() || m.CanContinue(), "a dead state after an accepted byte");
  }
  // Then greedily: the last allowed token, a few times.
  for (int step = 0; step < 32 && m.CanContinue(); ++step) {
    const std::vector<int32_t> allowed = m.AllowedTokens();
    if (allowed.empty()) break;
    fuzz::Expect(m.AcceptToken(allowed.back()), "an allowed token was refused");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::ExpectOnlyMoexErrors([&] { Exercise(ParseGbnf(text), text); });
  fuzz::ExpectOnlyMoexErrors([&] { Exercise(RegexGrammar(text), text); });
  if (nlohmann::ordered_json::accept(text)) {
    fuzz::ExpectOnlyMoexErrors(
        [&] { Exercise(JsonSchemaGrammar(nlohmann::ordered_json::parse(text)), text); });
  }
  return 0;
}

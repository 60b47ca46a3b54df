// Pre-tokenizer splitting with PCRE2. Patterns in tokenizer.json are written for Oniguruma (the
// engine behind HF tokenizers); SplitRegex translates the few constructs whose meaning differs in
// PCRE2 (\s, \S, line anchors) so both engines split text the same way.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace moex {

struct TextSpan {
  size_t begin;
  size_t end;
};

class SplitRegex {
 public:
  explicit SplitRegex(const std::string& pattern);
  ~SplitRegex();
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;

  // HF "Isolated" split of text[span]: every match and every gap between matches becomes its own
  // span, in order. text must be valid UTF-8.
  void Split(std::string_view text, TextSpan span, std::vector<TextSpan>* out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

// Rewrites an Oniguruma pattern into PCRE2 syntax with the same meaning (exposed for tests).
std::string TranslateOnigurumaPattern(const std::string& pattern);

}  // namespace moex

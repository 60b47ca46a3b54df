#include "text/tokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace moex {
namespace {

// Oniguruma's \s is Unicode White_Space; PCRE2's (with UCP) adds U+180E and differs in
// places, so \s is spelled out.
constexpr const char* kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

std::string PcreErrorText(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string TranslateOnigurumaPattern(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[i + 1];
      ++i;
      if (n == 's') {
        if (in_class) {
          out += kWhiteSpace;
        } else {
          out += std::string("[") + kWhiteSpace + "]";
        }
      } else if (n == 'S') {
        Check(!in_class,
              "tokenizer regex: \\S inside a character class is not supported: ", pattern);
        out += std::string("[^") + kWhiteSpace + "]";
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' or '^]' right after the opening bracket is a literal, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct SplitRegex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

SplitRegex::SplitRegex(const std::string& pattern) : pattern_(pattern), impl_(new Impl) {
  const std::string translated = TranslateOnigurumaPattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Oniguruma (Ruby syntax) anchors ^ and $ at line breaks.
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, nullptr);
  if (impl_->code == nullptr) {
    Fail("tokenizer regex does not compile at offset ", offset, " (", PcreErrorText(error),
         "): ", pattern);
  }
  // Without JIT support the interpreter is used: slower, same results.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

SplitRegex::~SplitRegex() = default;
SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;

void SplitRegex::Split(std::string_view text, TextSpan span, std::vector<TextSpan>* out) const {
  // One match block per thread: pcre2_match_data is not shareable and creating it per call
  // costs a malloc.
  struct MatchData {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~MatchData() { pcre2_match_data_free(data); }
  };
  thread_local MatchData match;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // Match within the span only, so anchors and lookarounds see the piece as HF does.
  const size_t base = span.begin;
  const size_t length = span.end - span.begin;
  size_t pos = 0;
  size_t gap_start = 0;
  while (pos <= length) {
    // The input was validated once up front; the JIT entry point skips the checks.
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject + base, length, pos, 0,
                                                match.data, nullptr)
                              : pcre2_match(impl_->code, subject + base, length, pos,
                                            PCRE2_NO_UTF_CHECK, match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) Fail("tokenizer regex match failed (", PcreErrorText(rc), "): ", pattern_);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.data);
    const size_t ms = ov[0], me = ov[1];
    if (me == ms) {
      // Empty matches split nothing; step over one code point.
      if (pos >= length) break;
      ++pos;
      while (pos < length && (static_cast<uint8_t>(text[base + pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (ms > gap_start) out->push_back({base + gap_start, base + ms});
    out->push_back({base + ms, base + me});
    gap_start = me;
    pos = me;
  }
  if (length > gap_start) out->push_back({base + gap_start, base + length});
}

}  // namespace moex

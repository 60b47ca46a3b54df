// The regular-expression front end (text/grammar.h): ECMAScript-like syntax (JSON Schema's
// `pattern` dialect), the regular subset only. Every construct outside it is refused with its
// offset in the pattern, never approximated.
#include <algorithm>

#include "core/error.h"
#include "text/grammar.h"
#include "text/tokenizer_utf8.h"

namespace moex {
namespace {

using Ranges = std::vector<std::pair<char32_t, char32_t>>;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                       {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                       {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kLineBreaks = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

Ranges Negate(const Ranges& r) {
  return GrammarExpr::Chars(r, true).chars;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool Contains(const Ranges& ranges, char32_t c) {
  for (auto [lo, hi] : ranges) {
    if (c >= lo && c <= hi) return true;
  }
  return false;
}

// The JSON-string spelling of a set of decoded characters: the characters that may appear raw,
// plus one escape for each of `"`, `\` and the controls that are in the set.
GrammarExpr JsonChars(const Ranges& ranges) {
  const GrammarExpr all = GrammarExpr::Chars(ranges);
  std::vector<GrammarExpr> alternatives;
  const Ranges raw = GrammarExpr::Chars({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true).chars;
  Ranges allowed;  // all ∩ raw
  for (auto [lo, hi] : all.chars) {
    for (auto [rlo, rhi] : raw) {
      const char32_t a = std::max(lo, rlo), b = std::min(hi, rhi);
      if (a <= b) allowed.push_back({a, b});
    }
  }
  if (!allowed.empty()) alternatives.push_back(GrammarExpr::Chars(allowed));
  for (char32_t c = 0; c <= 0x5C; ++c) {
    if (!(c < 0x20 || c == '"' || c == '\\') || !Contains(all.chars, c)) continue;
    std::string escape;
    switch (c) {
      case '"':
        escape = "\\\"";
        break;
      case '\\':
        escape = "\\\\";
        break;
      case '\b':
        escape = "\\b";
        break;
      case '\f':
        escape = "\\f";
        break;
      case '\n':
        escape = "\\n";
        break;
      case '\r':
        escape = "\\r";
        break;
      case '\t':
        escape = "\\t";
        break;
      default: {
        static const char* kHex = "0123456789abcdef";
        escape = std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
      }
    }
    alternatives.push_back(GrammarExpr::Literal(escape));
  }
  if (alternatives.empty()) return GrammarExpr::Chars({});  // Matches nothing.
  return GrammarExpr::Alt(std::move(alternatives));
}

class RegexParser {
 public:
  RegexParser(std::string_view pattern, bool json) : p_(pattern), json_(json) {}

  GrammarExpr Parse(bool anchored) {
    bool start_anchor = false;
    if (Peek() == '^') {
      start_anchor = true;
      ++pos_;
    }
    GrammarExpr body = ParseAlternates();
    if (pos_ < p_.size()) Error(pos_, "unbalanced ')'");
    if (anchored) return body;
    const GrammarExpr any =
        GrammarExpr::Repeat(Set(Negate({})), 0, GrammarExpr::kUnbounded);  // Search semantics.
    std::vector<GrammarExpr> seq;
    if (!start_anchor) seq.push_back(any);
    seq.push_back(std::move(body));
    if (!end_anchor_) seq.push_back(any);
    return GrammarExpr::Seq(std::move(seq));
  }

 private:
  char Peek(size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0'; }
  bool AtEnd() const { return pos_ >= p_.size(); }

  template <typename... Parts>
  [[noreturn]] void Error(size_t at, Parts&&... parts) const {
    Fail("regex at offset ", at, ": ", std::forward<Parts>(parts)...);
  }

  GrammarExpr Set(const Ranges& ranges) const {
    return json_ ? JsonChars(ranges) : GrammarExpr::Chars(ranges);
  }

  GrammarExpr ParseAlternates() {
    std::vector<GrammarExpr> alternatives;
    alternatives.push_back(ParseSequence());
    while (Peek() == '|' && !AtEnd()) {
      ++pos_;
      alternatives.push_back(ParseSequence());
    }
    if (alternatives.size() == 1) return std::move(alternatives[0]);
    GrammarExpr e;
    e.kind = GrammarExpr::Kind::kAlt;
    e.items = std::move(alternatives);
    return e;
  }

  GrammarExpr ParseSequence() {
    std::vector<GrammarExpr> items;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      const size_t start = pos_;
      if (Peek() == '$') {
        if (pos_ + 1 != p_.size() || depth_ > 0) Error(pos_, "'$' is supported only at the end");
        end_anchor_ = true;
        ++pos_;
        break;
      }
      GrammarExpr atom = ParseAtom();
      for (;;) {
        const char c = Peek();
        uint32_t min, max;
        if (c == '*') {
          min = 0, max = GrammarExpr::kUnbounded;
          ++pos_;
        } else if (c == '+') {
          min = 1, max = GrammarExpr::kUnbounded;
          ++pos_;
        } else if (c == '?') {
          min = 0, max = 1;
          ++pos_;
        } else if (c == '{' && ParseBraces(&min, &max)) {
        } else {
          break;
        }
        if (Peek() == '?') {
          ++pos_;  // Lazy: the same language.
        } else if (Peek() == '+') {
          Error(pos_, "possessive quantifiers are not supported");
        }
        if (min > max) Error(start, "repetition has min > max");
        if (min > kGrammarMaxRepeat || (max != GrammarExpr::kUnbounded && max > kGrammarMaxRepeat))
          Error(start, "repetition bound over ", kGrammarMaxRepeat);
        atom = GrammarExpr::Repeat(std::move(atom), min, max);
      }
      items.push_back(std::move(atom));
    }
    if (items.empty()) return GrammarExpr::Empty();
    GrammarExpr e;
    e.kind = GrammarExpr::Kind::kSeq;
    e.items = std::move(items);
    return e;
  }

  // {m} {m,} {m,n}; false (nothing consumed) when the brace is not a quantifier.
  bool ParseBraces(uint32_t* min, uint32_t* max) {
    size_t i = pos_ + 1;
    auto number = [&](uint64_t* v) {
      const size_t start = i;
      *v = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
        *v = std::min<uint64_t>(*v * 10 + uint64_t(p_[i] - '0'), uint64_t(1) << 40);
        ++i;
      }
      return i > start;
    };
    uint64_t a, b;
    if (!number(&a)) return false;
    b = a;
    bool unbounded = false;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      if (!number(&b)) unbounded = true;
    }
    if (i >= p_.size() || p_[i] != '}') return false;
    if (a > kGrammarMaxRepeat || (!unbounded && b > kGrammarMaxRepeat)) {
      Error(pos_, "repetition bound over ", kGrammarMaxRepeat);
    }
    pos_ = i + 1;
    *min = uint32_t(a);
    *max = unbounded ? GrammarExpr::kUnbounded : uint32_t(b);
    return true;
  }

  GrammarExpr ParseAtom() {
    const size_t start = pos_;
    const char c = Peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (Peek() == '?') {
          if (Peek(1) == ':') {
            pos_ += 2;
          } else if (Peek(1) == '=' || Peek(1) == '!' ||
                     (Peek(1) == '<' && (Peek(2) == '=' || Peek(2) == '!'))) {
            Error(start, "lookaround assertions are not supported");
          } else if (Peek(1) == '<' || (Peek(1) == 'P' && Peek(2) == '<')) {
            const size_t close = p_.find('>', pos_);
            if (close == std::string_view::npos) Error(start, "unterminated group name");
            pos_ = close + 1;
          } else {
            Error(start, "group flags (?", Peek(1), "...) are not supported");
          }
        }
        if (++depth_ > kGrammarMaxNesting) {
          Error(start, "groups nest deeper than ", kGrammarMaxNesting);
        }
        GrammarExpr inner = ParseAlternates();
        --depth_;
        if (Peek() != ')') Error(start, "unterminated group");
        ++pos_;
        return inner;
      }
      case '[':
        return ParseClass();
      case '.':
        ++pos_;
        return Set(Negate(kLineBreaks));
      case '^':
        Error(pos_, "'^' is supported only at the start");
      case '*':
      case '+':
      case '?':
        Error(pos_, "nothing to repeat before '", c, "'");
      case '\\': {
        Ranges ranges;
        if (ParseClassEscape(&ranges)) return Set(ranges);
        const char32_t ch = ParseEscape();
        return Set({{ch, ch}});
      }
      default: {
        char32_t cp;
        if (!DecodeUtf8(p_, &pos_, &cp)) Error(start, "invalid UTF-8");
        return Set({{cp, cp}});
      }
    }
  }

  // \d \D \w \W \s \S at pos_: consumes it and sets *ranges.
  bool ParseClassEscape(Ranges* ranges) {
    const char e = Peek(1);
    const Ranges* base = e == 'd' || e == 'D'   ? &kDigit
                         : e == 'w' || e == 'W' ? &kWord
                         : e == 's' || e == 'S' ? &kSpace
                                                : nullptr;
    if (base == nullptr) return false;
    pos_ += 2;
    *ranges = (e >= 'A' && e <= 'Z') ? Negate(*base) : *base;
    return true;
  }

  // A single-character escape at pos_ (after the class escapes were tried).
  char32_t ParseEscape(bool in_class = false) {
    const size_t start = pos_;
    ++pos_;
    if (AtEnd()) Error(start, "pattern ends with '\\'");
    const char e = p_[pos_++];
    switch (e) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case '0':
        return 0;
      case 'b':
        if (in_class) return '\b';
        Error(start, "word boundaries (\\b) are not supported");
      case 'B':
        Error(start, "word boundaries (\\B) are not supported");
      case 'x':
      case 'u': {
        uint32_t v = 0;
        if (e == 'u' && Peek() == '{') {
          ++pos_;
          int n = 0;
          while (HexValue(Peek()) >= 0 && n < 6) v = v * 16 + uint32_t(HexValue(p_[pos_++])), ++n;
          if (n == 0 || Peek() != '}') Error(start, "bad \\u{...} escape");
          ++pos_;
        } else {
          const int digits = e == 'x' ? 2 : 4;
          for (int i = 0; i < digits; ++i) {
            const int h = HexValue(Peek());
            if (h < 0) Error(start, "\\", e, " needs ", digits, " hex digits");
            v = v * 16 + uint32_t(h);
            ++pos_;
          }
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
          Error(start, "escape is not a Unicode scalar value");
        }
        return v;
      }
      default:
        if (e >= '1' && e <= '9') Error(start, "backreferences are not supported");
        if (e == 'k') Error(start, "named backreferences are not supported");
        if (e == 'p' || e == 'P') Error(start, "Unicode property escapes are not supported");
        if (e == 'c') Error(start, "control escapes (\\c) are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          Error(start, "unknown escape '\\", e, "'");
        }
        if (uint8_t(e) >= 0x80) Error(start, "escaped non-ASCII character");
        return char32_t(uint8_t(e));
    }
  }

  GrammarExpr ParseClass() {
    const size_t start = pos_++;
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges ranges;
    while (Peek() != ']') {
      if (AtEnd()) Error(start, "unterminated character class");
      const size_t at = pos_;
      Ranges cls;
      if (Peek() == '\\' && ParseClassEscape(&cls)) {
        ranges.insert(ranges.end(), cls.begin(), cls.end());
        continue;
      }
      const char32_t lo = ClassChar();
      char32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < p_.size()) {
        ++pos_;
        if (Peek() == '\\' && (Peek(1) == 'd' || Peek(1) == 'w' || Peek(1) == 's' ||
                               Peek(1) == 'D' || Peek(1) == 'W' || Peek(1) == 'S')) {
          Error(at, "a class escape cannot end a range");
        }
        hi = ClassChar();
        if (hi < lo) Error(at, "character range is reversed");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    return Set(negated ? Negate(ranges) : ranges);
  }

  char32_t ClassChar() {
    if (Peek() == '\\') return ParseEscape(true);
    const size_t start = pos_;
    char32_t cp;
    if (!DecodeUtf8(p_, &pos_, &cp)) Error(start, "invalid UTF-8");
    return cp;
  }

  std::string_view p_;
  bool json_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool end_anchor_ = false;
};

}  // namespace

GrammarExpr RegexExpr(GrammarBuilder& builder, std::string_view pattern, bool json_string,
                      bool anchored) {
  (void)builder;
  return RegexParser(pattern, json_string).Parse(anchored);
}

Grammar RegexGrammar(std::string_view pattern) {
  GrammarBuilder builder;
  const uint32_t root = builder.Rule("root");
  builder.Define(root, RegexExpr(builder, pattern, false, true));
  return builder.Build(root);
}

}  // namespace moex

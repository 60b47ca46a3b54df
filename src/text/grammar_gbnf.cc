// The GBNF front end (text/grammar.h): a recursive-descent parser over the text, building
// GrammarExpr bodies; positions are kept to name the line and column of every error.
#include <set>

#include "core/error.h"
#include "text/grammar.h"
#include "text/tokenizer_utf8.h"

namespace moex {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  Grammar Parse(std::string_view root) {
    SkipSpace(true);
    while (!AtEnd()) {
      ParseRule();
      SkipSpace(true);
    }
    if (!defined_.count(std::string(root))) Fail("GBNF grammar has no rule '", root, "'");
    return builder_.Build(builder_.Rule(root));
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  std::string Where(size_t at) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((uint8_t(text_[i]) & 0xC0) != 0x80) {
        ++column;
      }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
  }

  template <typename... Parts>
  [[noreturn]] void Error(size_t at, Parts&&... parts) const {
    Fail("GBNF ", Where(at), ": ", std::forward<Parts>(parts)...);
  }

  // Spaces, tabs, \r and # comments; newlines too when `newlines`.
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && newlines)) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    if (pos_ == start) Error(start, "expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  void ParseRule() {
    const size_t start = pos_;
    const std::string name = ParseName();
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") Error(pos_, "expected '::=' after rule name '", name, "'");
    pos_ += 3;
    if (!defined_.insert(name).second) Error(start, "rule '", name, "' is defined twice");
    const uint32_t rule = builder_.Rule(name, seen_.insert(name).second ? Where(start) : "");
    SkipSpace(true);
    const GrammarExpr body = ParseAlternates(false);
    SkipSpace(false);
    if (!AtEnd() && Peek() != '\n') Error(pos_, "expected a newline or the end after the rule");
    builder_.Define(rule, body);
  }

  GrammarExpr ParseAlternates(bool nested) {
    std::vector<GrammarExpr> alternatives;
    alternatives.push_back(ParseSequence(nested));
    for (;;) {
      if (Peek() == '|') {
        ++pos_;
        SkipSpace(true);
        alternatives.push_back(ParseSequence(nested));
        continue;
      }
      if (!nested) {  // A line that starts with '|' continues the rule.
        const size_t save = pos_;
        SkipSpace(true);
        if (Peek() == '|') continue;
        pos_ = save;
      }
      break;
    }
    if (alternatives.size() == 1) return std::move(alternatives[0]);
    GrammarExpr e;
    e.kind = GrammarExpr::Kind::kAlt;
    e.items = std::move(alternatives);
    return e;
  }

  GrammarExpr ParseSequence(bool nested) {
    std::vector<GrammarExpr> items;
    for (;;) {
      const char c = Peek();
      const size_t start = pos_;
      GrammarExpr item;
      if (c == '"') {
        item = ParseLiteral();
      } else if (c == '[') {
        item = ParseClass();
      } else if (c == '.') {
        ++pos_;
        item = GrammarExpr::Chars({}, true);
      } else if (c == '(') {
        ++pos_;
        if (++depth_ > kGrammarMaxNesting)
          Error(start, "groups nest deeper than ", kGrammarMaxNesting);
        SkipSpace(true);
        item = ParseAlternates(true);
        --depth_;
        SkipSpace(true);
        if (Peek() != ')') Error(pos_, "expected ')' to close the group opened at ", Where(start));
        ++pos_;
      } else if (IsNameChar(c)) {
        const std::string name = ParseName();
        // Where() scans from the start: only for a name's first use.
        item = GrammarExpr::Ref(builder_.Rule(name, seen_.insert(name).second ? Where(start) : ""));
      } else if (c == '<') {
        Error(pos_, "token references <...> are not supported");
      } else {
        break;
      }
      SkipSpace(nested);
      while (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{') {
        item = ParsePostfix(std::move(item));
        SkipSpace(nested);
      }
      items.push_back(std::move(item));
    }
    if (items.empty()) return GrammarExpr::Empty();
    GrammarExpr e;
    e.kind = GrammarExpr::Kind::kSeq;
    e.items = std::move(items);
    return e;
  }

  uint32_t ParseNumber() {
    const size_t start = pos_;
    uint64_t n = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      n = n * 10 + uint64_t(Peek() - '0');
      if (n > kGrammarMaxRepeat) Error(start, "repetition bound over ", kGrammarMaxRepeat);
      ++pos_;
    }
    if (pos_ == start) Error(start, "expected a number");
    return uint32_t(n);
  }

  GrammarExpr ParsePostfix(GrammarExpr item) {
    const size_t start = pos_;
    const char op = text_[pos_++];
    if (op == '*') return GrammarExpr::Repeat(std::move(item), 0, GrammarExpr::kUnbounded);
    if (op == '+') return GrammarExpr::Repeat(std::move(item), 1, GrammarExpr::kUnbounded);
    if (op == '?') return GrammarExpr::Repeat(std::move(item), 0, 1);
    SkipSpace(true);
    uint32_t min = 0, max;
    if (Peek() != ',') min = ParseNumber();
    SkipSpace(true);
    if (Peek() == ',') {
      ++pos_;
      SkipSpace(true);
      max = Peek() == '}' ? GrammarExpr::kUnbounded : ParseNumber();
    } else {
      max = min;
    }
    SkipSpace(true);
    if (Peek() != '}') Error(pos_, "expected '}' to close the repetition");
    ++pos_;
    if (min > max) Error(start, "repetition {", min, ",", max, "} has min > max");
    return GrammarExpr::Repeat(std::move(item), min, max);
  }

  // One character of a literal or class at pos_ (an escape or a UTF-8 character).
  char32_t ParseChar() {
    const size_t start = pos_;
    if (AtEnd()) Error(start, "unexpected end of the grammar");
    if (Peek() == '\\') {
      ++pos_;
      const char e = Peek();
      ++pos_;
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
        case 'x':
        case 'u':
        case 'U': {
          const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t v = 0;
          for (int i = 0; i < digits; ++i) {
            const int h = HexValue(Peek());
            if (h < 0) Error(start, "\\", e, " needs ", digits, " hex digits");
            v = v * 16 + uint32_t(h);
            ++pos_;
          }
          if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
            Error(start, "escape is not a Unicode scalar value");
          }
          return v;
        }
        default:
          if (e != '\0' &&
              std::string_view("\\\"'[]-^./|(){}*+?#").find(e) != std::string_view::npos) {
            return char32_t(uint8_t(e));
          }
          Error(start, "unknown escape '\\", e, "'");
      }
    }
    char32_t cp;
    if (!DecodeUtf8(text_, &pos_, &cp)) Error(start, "invalid UTF-8");
    return cp;
  }

  GrammarExpr ParseLiteral() {
    const size_t start = pos_++;
    std::string bytes;
    while (Peek() != '"') {
      if (AtEnd() || Peek() == '\n') Error(start, "unterminated string literal");
      AppendUtf8(ParseChar(), &bytes);
    }
    ++pos_;
    return GrammarExpr::Literal(std::move(bytes));
  }

  GrammarExpr ParseClass() {
    const size_t start = pos_++;
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<char32_t, char32_t>> ranges;
    while (Peek() != ']') {
      if (AtEnd() || Peek() == '\n') Error(start, "unterminated character class");
      const size_t at = pos_;
      const char32_t lo = ParseChar();
      char32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        hi = ParseChar();
        if (hi < lo) Error(at, "character range is reversed");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    if (ranges.empty()) Error(start, "empty character class");
    return GrammarExpr::Chars(std::move(ranges), negated);
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
  GrammarBuilder builder_;
  std::set<std::string> defined_, seen_;
};

}  // namespace

Grammar ParseGbnf(std::string_view text, std::string_view root) {
  return GbnfParser(text).Parse(root);
}

}  // namespace moex

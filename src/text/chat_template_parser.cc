// Lexer and parser of the Jinja subset. Whitespace follows transformers' chat-template
// environment: trim_blocks and lstrip_blocks on, plus the "-" markers.
#include <algorithm>
#include <cctype>
#include <charconv>

#include "core/error.h"
#include "text/chat_template_ast.h"

namespace moex::jinja {
namespace {

struct Token {
  enum class Type { kName, kString, kInt, kFloat, kOp, kEnd };
  Type type = Type::kEnd;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

// One piece of template source: text, an expression tag or a statement tag.
struct Item {
  enum class Type { kText, kExpr, kStmt };
  Type type = Type::kText;
  std::string text;
  std::vector<Token> tokens;
  int line = 0;
};

bool IsSpaceOrTab(char c) {
  return c == ' ' || c == '\t';
}
bool IsWhite(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int LineOf(const std::string& s, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < s.size(); ++i) line += s[i] == '\n';
  return line;
}

// Tokenizes the inside of a tag from pos up to its closing delimiter; returns the position
// just after the close and whether the close had a "-".
size_t LexTag(const std::string& src, size_t pos, const std::string& close, int line,
              std::vector<Token>* tokens, bool* strip_after) {
  static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                               "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                               "{",  "}",  ",",  ".",  ":",  "|",  "="};
  while (true) {
    while (pos < src.size() && IsWhite(src[pos])) ++pos;
    Check(pos < src.size(), "chat template line ", line, ": unterminated tag");
    if (src[pos] == '-' && src.compare(pos + 1, close.size(), close) == 0) {
      *strip_after = true;
      return pos + 1 + close.size();
    }
    if (src.compare(pos, close.size(), close) == 0) {
      *strip_after = false;
      return pos + close.size();
    }
    const char c = src[pos];
    Token t;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos;
      while (end < src.size() &&
             (std::isalnum(static_cast<unsigned char>(src[end])) || src[end] == '_')) {
        ++end;
      }
      t.type = Token::Type::kName;
      t.text = src.substr(pos, end - pos);
      pos = end;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = pos;
      while (end < src.size() && std::isdigit(static_cast<unsigned char>(src[end]))) ++end;
      if (end + 1 < src.size() && src[end] == '.' &&
          std::isdigit(static_cast<unsigned char>(src[end + 1]))) {
        ++end;
        while (end < src.size() && std::isdigit(static_cast<unsigned char>(src[end]))) ++end;
        t.type = Token::Type::kFloat;
        const auto [p, ec] = std::from_chars(src.data() + pos, src.data() + end, t.f);
        Check(ec == std::errc(), "chat template line ", line, ": number ",
              src.substr(pos, end - pos), " is out of range");
      } else {
        t.type = Token::Type::kInt;
        const auto [p, ec] = std::from_chars(src.data() + pos, src.data() + end, t.i);
        Check(ec == std::errc(), "chat template line ", line, ": integer ",
              src.substr(pos, end - pos), " does not fit in 64 bits");
      }
      pos = end;
    } else if (c == '\'' || c == '"') {
      std::string s;
      size_t i = pos + 1;
      while (true) {
        Check(i < src.size(), "chat template line ", line, ": unterminated string");
        if (src[i] == c) break;
        if (src[i] == '\\' && i + 1 < src.size()) {
          const char e = src[++i];
          switch (e) {
            case 'n':
              s += '\n';
              break;
            case 't':
              s += '\t';
              break;
            case 'r':
              s += '\r';
              break;
            default:
              s += e;  // \\, \', \" and unknown escapes keep the character
          }
          ++i;
          continue;
        }
        s += src[i++];
      }
      t.type = Token::Type::kString;
      t.text = std::move(s);
      pos = i + 1;
    } else {
      bool found = false;
      for (const char* op : kOps) {
        const size_t n = std::char_traits<char>::length(op);
        if (src.compare(pos, n, op) == 0) {
          t.type = Token::Type::kOp;
          t.text = op;
          pos += n;
          found = true;
          break;
        }
      }
      Check(found, "chat template line ", line, ": unexpected character '", std::string(1, c), "'");
    }
    tokens->push_back(std::move(t));
  }
}

std::vector<Item> Lex(const std::string& src) {
  std::vector<Item> items;
  size_t pos = 0;
  bool strip_next = false;    // previous tag ended with "-"
  bool trim_newline = false;  // previous tag was a block (trim_blocks)
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#') {
      open = src.find('{', open + 1);
    }
    if (open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && IsWhite(text[k])) ++k;
      text.erase(0, k);
    } else if (trim_newline) {
      if (text.rfind("\n", 0) == 0) {
        text.erase(0, 1);
      } else if (text.rfind("\r\n", 0) == 0) {
        text.erase(0, 2);
      }
    }
    if (open == std::string::npos) {
      if (!text.empty()) items.push_back({Item::Type::kText, text, {}, LineOf(src, pos)});
      break;
    }
    const char kind = src[open + 1];
    size_t inner = open + 2;
    const bool strip_before = inner < src.size() && src[inner] == '-';
    const bool keep_before = inner < src.size() && src[inner] == '+';
    if (strip_before || keep_before) ++inner;
    if (strip_before) {
      while (!text.empty() && IsWhite(text.back())) text.pop_back();
    } else if (kind != '{' && !keep_before) {
      // lstrip_blocks: spaces and tabs between a line start and a block tag go (judged on
      // the source line, as Jinja's lexer does).
      size_t j = open;
      while (j > 0 && IsSpaceOrTab(src[j - 1])) --j;
      if (j == 0 || src[j - 1] == '\n') {
        while (!text.empty() && IsSpaceOrTab(text.back())) text.pop_back();
      }
    }
    if (!text.empty()) items.push_back({Item::Type::kText, text, {}, LineOf(src, pos)});
    const int line = LineOf(src, open);
    if (kind == '#') {
      const size_t close = src.find("#}", inner);
      Check(close != std::string::npos, "chat template line ", line, ": unterminated comment");
      strip_next = close > 0 && src[close - 1] == '-';
      trim_newline = true;
      pos = close + 2;
      continue;
    }
    Item item;
    item.type = kind == '{' ? Item::Type::kExpr : Item::Type::kStmt;
    item.line = line;
    bool strip_after = false;
    pos = LexTag(src, inner, kind == '{' ? "}}" : "%}", line, &item.tokens, &strip_after);
    strip_next = strip_after;
    trim_newline = kind == '%';
    items.push_back(std::move(item));
  }
  return items;
}

class ExprParser {
  // Counts the parser's own recursion (parentheses, "not not", "- -"), which runs before
  // any node exists to carry a height.
  class DepthGuard {
   public:
    explicit DepthGuard(ExprParser& p) : p_(p) {
      Check(++p_.depth_ <= kMaxExprHeight, "chat template line ", p_.line_,
            ": expression nested too deeply (more than ", kMaxExprHeight, " levels)");
    }
    ~DepthGuard() { --p_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    ExprParser& p_;
  };

 public:
  ExprParser(const std::vector<Token>& tokens, size_t start, int line)
      : tokens_(tokens), pos_(start), line_(line) {}

  std::unique_ptr<Expr> Parse() { return Ternary(); }
  bool AtEnd() const { return pos_ >= tokens_.size(); }
  size_t pos() const { return pos_; }
  bool PeekName(const char* name) const {
    return pos_ < tokens_.size() && tokens_[pos_].type == Token::Type::kName &&
           tokens_[pos_].text == name;
  }
  bool PeekOp(const char* op) const {
    return pos_ < tokens_.size() && tokens_[pos_].type == Token::Type::kOp &&
           tokens_[pos_].text == op;
  }
  void ExpectOp(const char* op) {
    Check(PeekOp(op), "chat template line ", line_, ": expected '", op, "'");
    ++pos_;
  }
  void ExpectName(const char* name) {
    Check(PeekName(name), "chat template line ", line_, ": expected '", name, "'");
    ++pos_;
  }
  std::string Name() {
    Check(pos_ < tokens_.size() && tokens_[pos_].type == Token::Type::kName, "chat template line ",
          line_, ": expected a name");
    return tokens_[pos_++].text;
  }

 private:
  std::unique_ptr<Expr> Make(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line_;
    return e;
  }
  // Sets e's height from its children; refuses trees too tall to evaluate safely (long
  // operator chains are built by loops, not recursion, so the guard does not see them).
  std::unique_ptr<Expr> Sized(std::unique_ptr<Expr> e) {
    int below = 0;
    for (const auto& a : e->args)
      if (a) below = std::max(below, a->height);
    for (const auto& [key, a] : e->kwargs)
      if (a) below = std::max(below, a->height);
    e->height = below + 1;
    Check(e->height <= kMaxExprHeight, "chat template line ", line_,
          ": expression nested too deeply (more than ", kMaxExprHeight, " levels)");
    return e;
  }
  std::unique_ptr<Expr> Binary(const std::string& op, std::unique_ptr<Expr> a,
                               std::unique_ptr<Expr> b) {
    auto e = Make(Expr::Kind::kBinary);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return Sized(std::move(e));
  }

  std::unique_ptr<Expr> Ternary() {
    const DepthGuard guard(*this);
    auto value = Or();
    if (PeekName("if")) {
      ++pos_;
      auto cond = Or();
      std::unique_ptr<Expr> other;
      if (PeekName("else")) {
        ++pos_;
        other = Ternary();
      }
      auto e = Make(Expr::Kind::kTernary);
      e->args.push_back(std::move(value));
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(other));
      return Sized(std::move(e));
    }
    return value;
  }
  std::unique_ptr<Expr> Or() {
    auto a = And();
    while (PeekName("or")) {
      ++pos_;
      a = Binary("or", std::move(a), And());
    }
    return a;
  }
  std::unique_ptr<Expr> And() {
    auto a = Not();
    while (PeekName("and")) {
      ++pos_;
      a = Binary("and", std::move(a), Not());
    }
    return a;
  }
  std::unique_ptr<Expr> Not() {
    if (PeekName("not")) {
      const DepthGuard guard(*this);
      ++pos_;
      auto e = Make(Expr::Kind::kUnary);
      e->name = "not";
      e->args.push_back(Not());
      return Sized(std::move(e));
    }
    return Compare();
  }
  std::unique_ptr<Expr> Compare() {
    auto a = Concat();
    while (true) {
      if (pos_ >= tokens_.size()) return a;
      const Token& t = tokens_[pos_];
      if (t.type == Token::Type::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                         t.text == ">" || t.text == "<=" || t.text == ">=")) {
        ++pos_;
        a = Binary(t.text, std::move(a), Concat());
      } else if (PeekName("in")) {
        ++pos_;
        a = Binary("in", std::move(a), Concat());
      } else if (PeekName("not") && pos_ + 1 < tokens_.size() &&
                 tokens_[pos_ + 1].type == Token::Type::kName && tokens_[pos_ + 1].text == "in") {
        pos_ += 2;
        a = Binary("not in", std::move(a), Concat());
      } else if (PeekName("is")) {
        ++pos_;
        auto e = Make(Expr::Kind::kTest);
        if (PeekName("not")) {
          ++pos_;
          e->negate = true;
        }
        e->name = Name();
        e->args.push_back(std::move(a));
        if (PeekOp("(")) {
          ++pos_;
          while (!PeekOp(")")) {
            e->args.push_back(Ternary());
            if (!PeekOp(")")) ExpectOp(",");
          }
          ++pos_;
        } else if (pos_ < tokens_.size() && tokens_[pos_].type != Token::Type::kOp &&
                   !PeekName("and") && !PeekName("or") && !PeekName("else") && !PeekName("if")) {
          e->args.push_back(Concat());  // "is divisibleby 3", "is sameas x"
        }
        a = Sized(std::move(e));
      } else {
        return a;
      }
    }
  }
  std::unique_ptr<Expr> Concat() {
    auto a = Additive();
    while (PeekOp("~")) {
      ++pos_;
      a = Binary("~", std::move(a), Additive());
    }
    return a;
  }
  std::unique_ptr<Expr> Additive() {
    auto a = Multiplicative();
    while (PeekOp("+") || PeekOp("-")) {
      const std::string op = tokens_[pos_++].text;
      a = Binary(op, std::move(a), Multiplicative());
    }
    return a;
  }
  std::unique_ptr<Expr> Multiplicative() {
    auto a = Unary();
    while (PeekOp("*") || PeekOp("/") || PeekOp("//") || PeekOp("%")) {
      const std::string op = tokens_[pos_++].text;
      a = Binary(op, std::move(a), Unary());
    }
    return a;
  }
  std::unique_ptr<Expr> Unary() {
    if (PeekOp("-") || PeekOp("+")) {
      const DepthGuard guard(*this);
      auto e = Make(Expr::Kind::kUnary);
      e->name = tokens_[pos_++].text;
      e->args.push_back(Unary());
      return Sized(std::move(e));
    }
    auto a = Filtered();
    if (PeekOp("**")) {
      ++pos_;
      a = Binary("**", std::move(a), Unary());
    }
    return a;
  }
  void CallArgs(Expr* e) {
    // After "(": positional and keyword arguments up to ")".
    while (!PeekOp(")")) {
      if (pos_ + 1 < tokens_.size() && tokens_[pos_].type == Token::Type::kName &&
          tokens_[pos_ + 1].type == Token::Type::kOp && tokens_[pos_ + 1].text == "=") {
        std::string key = tokens_[pos_].text;
        pos_ += 2;
        e->kwargs.emplace_back(std::move(key), Ternary());
      } else {
        e->args.push_back(Ternary());
      }
      if (!PeekOp(")")) ExpectOp(",");
    }
    ++pos_;
  }
  std::unique_ptr<Expr> Filtered() {
    auto a = Postfix();
    while (PeekOp("|")) {
      ++pos_;
      auto e = Make(Expr::Kind::kFilter);
      e->name = Name();
      e->args.push_back(std::move(a));
      if (PeekOp("(")) {
        ++pos_;
        CallArgs(e.get());
      }
      a = Sized(std::move(e));
    }
    return a;
  }
  std::unique_ptr<Expr> Postfix() {
    auto a = Primary();
    while (true) {
      if (PeekOp(".")) {
        ++pos_;
        auto e = Make(Expr::Kind::kAttr);
        e->name = Name();
        e->args.push_back(std::move(a));
        a = Sized(std::move(e));
      } else if (PeekOp("[")) {
        ++pos_;
        std::unique_ptr<Expr> parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
          if (!PeekOp(":") && !PeekOp("]")) parts[n] = Ternary();
          if (PeekOp(":")) {
            ++pos_;
            slice = true;
            Check(++n < 3, "chat template line ", line_, ": bad slice");
            continue;
          }
          break;
        }
        ExpectOp("]");
        // `x[]` has no index to evaluate (a slice may leave every part out: `x[:]`).
        Check(slice || parts[0] != nullptr, "chat template line ", line_, ": empty subscript []");
        auto e = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kIndex);
        e->args.push_back(std::move(a));
        if (slice) {
          for (auto& p : parts) e->args.push_back(std::move(p));
        } else {
          e->args.push_back(std::move(parts[0]));
        }
        a = Sized(std::move(e));
      } else if (PeekOp("(")) {
        ++pos_;
        auto e = Make(Expr::Kind::kCall);
        e->args.push_back(std::move(a));
        CallArgs(e.get());
        a = Sized(std::move(e));
      } else {
        return a;
      }
    }
  }
  std::unique_ptr<Expr> Primary() {
    Check(pos_ < tokens_.size(), "chat template line ", line_, ": expression ends early");
    const Token& t = tokens_[pos_++];
    auto e = Make(Expr::Kind::kLiteral);
    switch (t.type) {
      case Token::Type::kString: {
        std::string s = t.text;
        // Adjacent string literals concatenate.
        while (pos_ < tokens_.size() && tokens_[pos_].type == Token::Type::kString) {
          s += tokens_[pos_++].text;
        }
        e->value = Value::String(std::move(s));
        return e;
      }
      case Token::Type::kInt:
        e->value = Value::Int(t.i);
        return e;
      case Token::Type::kFloat:
        e->value = Value::Float(t.f);
        return e;
      case Token::Type::kName:
        if (t.text == "true" || t.text == "True") {
          e->value = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      case Token::Type::kOp:
        if (t.text == "(") {
          auto inner = Ternary();
          if (PeekOp(",")) {  // a tuple: treated as a list
            auto list = Make(Expr::Kind::kList);
            list->args.push_back(std::move(inner));
            while (PeekOp(",")) {
              ++pos_;
              if (PeekOp(")")) break;
              list->args.push_back(Ternary());
            }
            inner = Sized(std::move(list));
          }
          ExpectOp(")");
          return inner;
        }
        if (t.text == "[") {
          e->kind = Expr::Kind::kList;
          while (!PeekOp("]")) {
            e->args.push_back(Ternary());
            if (!PeekOp("]")) ExpectOp(",");
          }
          ++pos_;
          return Sized(std::move(e));
        }
        if (t.text == "{") {
          e->kind = Expr::Kind::kDict;
          while (!PeekOp("}")) {
            e->args.push_back(Ternary());  // key
            ExpectOp(":");
            e->args.push_back(Ternary());  // value
            if (!PeekOp("}")) ExpectOp(",");
          }
          ++pos_;
          return Sized(std::move(e));
        }
        break;
      default:
        break;
    }
    Fail("chat template line ", line_, ": unexpected '", t.text, "'");
  }

  const std::vector<Token>& tokens_;
  size_t pos_;
  int line_;
  int depth_ = 0;
};

class Parser {
 public:
  explicit Parser(std::vector<Item> items) : items_(std::move(items)) {}

  // Parses until one of the end keywords (or the end); returns the keyword met ("" at end).
  std::string ParseBody(Body* body, std::initializer_list<const char*> ends) {
    while (pos_ < items_.size()) {
      Item& item = items_[pos_];
      if (item.type == Item::Type::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->text = item.text;
        body->push_back(std::move(n));
        ++pos_;
        continue;
      }
      if (item.type == Item::Type::kExpr) {
        ExprParser p(item.tokens, 0, item.line);
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->expr = p.Parse();
        Check(p.AtEnd(), "chat template line ", item.line, ": unexpected tokens in {{ }}");
        body->push_back(std::move(n));
        ++pos_;
        continue;
      }
      Check(!item.tokens.empty() && item.tokens[0].type == Token::Type::kName,
            "chat template line ", item.line, ": empty or malformed {% %}");
      const std::string keyword = item.tokens[0].text;
      for (const char* end : ends) {
        if (keyword == end) return keyword;
      }
      ++pos_;
      const bool block =
          keyword == "if" || keyword == "for" || keyword == "set" || keyword == "macro";
      Check(!block || nesting_ < kMaxStatementNesting, "chat template line ", item.line,
            ": blocks nested too deeply (more than ", kMaxStatementNesting, " levels)");
      if (block) ++nesting_;
      struct Unnest {
        int& n;
        bool on;
        ~Unnest() {
          if (on) --n;
        }
      } unnest{nesting_, block};
      if (keyword == "if") {
        body->push_back(ParseIf(item));
      } else if (keyword == "for") {
        body->push_back(ParseFor(item));
      } else if (keyword == "set") {
        body->push_back(ParseSet(item));
      } else if (keyword == "macro") {
        body->push_back(ParseMacro(item));
      } else if (keyword == "generation" || keyword == "endgeneration") {
        // transformers' assistant-mask markers: no output of their own.
      } else {
        Fail("chat template line ", item.line, ": unsupported statement '", keyword,
             "' (supported: if/elif/else, for, set, macro, generation)");
      }
    }
    // Only dereference ends when there is one: Check's message is built eagerly.
    if (ends.size() != 0) Fail("chat template: missing end tag (", *ends.begin(), ")");
    return "";
  }

 private:
  std::unique_ptr<Node> ParseIf(const Item& first) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kIf;
    n->line = first.line;
    const Item* cond_item = &first;
    while (true) {
      ExprParser p(cond_item->tokens, 1, cond_item->line);
      auto cond = p.Parse();
      Check(p.AtEnd(), "chat template line ", cond_item->line, ": unexpected tokens after if");
      Body body;
      const std::string end = ParseBody(&body, {"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      const Item& at = items_[pos_++];
      if (end == "elif") {
        cond_item = &at;
        continue;
      }
      if (end == "else") {
        const std::string close = ParseBody(&n->else_body, {"endif"});
        ++pos_;
        (void)close;
      }
      return n;
    }
  }

  std::unique_ptr<Node> ParseFor(const Item& item) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kFor;
    n->line = item.line;
    ExprParser p(item.tokens, 1, item.line);
    n->targets.push_back(p.Name());
    while (p.PeekOp(",")) {
      p.ExpectOp(",");
      n->targets.push_back(p.Name());
    }
    p.ExpectName("in");
    n->expr = p.Parse();
    // "for x in xs if cond": the ternary parser took "xs if cond" as a conditional.
    if (n->expr->kind == Expr::Kind::kTernary && !n->expr->args[2]) {
      n->filter = std::move(n->expr->args[1]);
      n->expr = std::move(n->expr->args[0]);
    }
    if (p.PeekName("recursive")) Fail("chat template line ", item.line, ": recursive loops");
    Check(p.AtEnd(), "chat template line ", item.line, ": unexpected tokens in for");
    const std::string end = ParseBody(&n->body, {"else", "endfor"});
    ++pos_;
    if (end == "else") {
      ParseBody(&n->else_body, {"endfor"});
      ++pos_;
    }
    return n;
  }

  // {% macro name(a, b=default) %} body {% endmacro %}
  std::unique_ptr<Node> ParseMacro(const Item& item) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kMacro;
    n->line = item.line;
    ExprParser p(item.tokens, 1, item.line);
    n->targets.push_back(p.Name());
    p.ExpectOp("(");
    while (!p.PeekOp(")")) {
      std::string name = p.Name();
      std::unique_ptr<Expr> fallback;
      if (p.PeekOp("=")) {
        p.ExpectOp("=");
        fallback = p.Parse();
      }
      n->params.emplace_back(std::move(name), std::move(fallback));
      if (!p.PeekOp(")")) p.ExpectOp(",");
    }
    p.ExpectOp(")");
    Check(p.AtEnd(), "chat template line ", item.line, ": unexpected tokens in macro");
    ParseBody(&n->body, {"endmacro"});
    ++pos_;
    return n;
  }

  std::unique_ptr<Node> ParseSet(const Item& item) {
    auto n = std::make_unique<Node>();
    n->line = item.line;
    ExprParser p(item.tokens, 1, item.line);
    n->targets.push_back(p.Name());
    if (p.PeekOp(".")) {
      p.ExpectOp(".");
      n->attr = p.Name();
    }
    if (p.AtEnd()) {
      n->kind = Node::Kind::kSetBlock;
      ParseBody(&n->body, {"endset"});
      ++pos_;
      return n;
    }
    n->kind = Node::Kind::kSet;
    p.ExpectOp("=");
    n->expr = p.Parse();
    Check(p.AtEnd(), "chat template line ", item.line, ": unexpected tokens in set");
    return n;
  }

  std::vector<Item> items_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

}  // namespace

Body Parse(const std::string& source) {
  Parser parser(Lex(source));
  Body body;
  parser.ParseBody(&body, {});
  return body;
}

}  // namespace moex::jinja

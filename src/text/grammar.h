// Grammars for constrained decoding (docs/grammar.md).
//
// A Grammar is a set of rules; a rule is a list of alternatives, each a sequence of elements;
// an element is a byte range [lo, hi] or a reference to a rule. Everything is over bytes, not
// code points: a character class such as [^"\\] or [α-ω] is compiled into the UTF-8 byte
// sequences of its code points (surrogates excluded), so a token that splits a multi-byte
// character is matched exactly like any other byte string. Repetitions (* + ? {m,n}) become
// helper rules, recursion in tail position does not grow the parse stack.
//
// Three front ends build grammars: GBNF (llama.cpp's syntax), a regular-expression subset, and
// JSON Schema. Every failure -- a syntax error, an undefined rule, a left recursion, a grammar
// over the size bounds, an unsupported keyword -- is a moex::Error naming the place at fault.
// Grammars are immutable once built and may be shared between threads.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace moex {

// Size bounds: a grammar beyond them is refused, so a request cannot make the server build
// (or match against) an unbounded structure.
inline constexpr size_t kGrammarMaxRules = 1 << 17;
inline constexpr size_t kGrammarMaxElements = 1 << 21;
inline constexpr uint32_t kGrammarMaxRepeat = 10000;  // n of {m,n}, and m of {m,}
inline constexpr int kGrammarMaxNesting = 200;        // nested groups or schemas (parsers recurse)

// The expression form the front ends produce; GrammarBuilder lowers it to byte-level rules.
struct GrammarExpr {
  enum class Kind : uint8_t { kEmpty, kBytes, kChars, kRule, kSeq, kAlt, kRepeat };
  static constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

  Kind kind = Kind::kEmpty;
  std::string bytes;                                 // kBytes: a literal byte string
  std::vector<std::pair<char32_t, char32_t>> chars;  // kChars: code-point ranges, inclusive
  uint32_t rule = 0;                                 // kRule
  std::vector<GrammarExpr> items;                    // kSeq, kAlt; kRepeat: one item
  uint32_t min = 0, max = 0;                         // kRepeat

  static GrammarExpr Empty() { return {}; }
  static GrammarExpr Literal(std::string bytes);
  // Code points in any of the ranges (or, negated, in none of them); surrogates never match.
  static GrammarExpr Chars(std::vector<std::pair<char32_t, char32_t>> ranges, bool negated = false);
  static GrammarExpr Char(char32_t c) { return Chars({{c, c}}); }
  static GrammarExpr Ref(uint32_t rule);
  static GrammarExpr Seq(std::vector<GrammarExpr> items);
  static GrammarExpr Alt(std::vector<GrammarExpr> items);
  // Checks min <= max and the repetition bound (kGrammarMaxRepeat).
  static GrammarExpr Repeat(GrammarExpr item, uint32_t min, uint32_t max);
};

// A compiled grammar. Rule r's alternatives start at elements()[alternatives(r)[i]]; each runs
// to an element of kind kEnd.
class Grammar {
 public:
  struct Element {
    enum class Kind : uint8_t { kBytes, kRule, kEnd };
    Kind kind;
    uint8_t lo = 0, hi = 0;  // kBytes
    uint32_t rule = 0;       // kRule
  };

  uint32_t root() const { return root_; }
  size_t num_rules() const { return names_.size(); }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }
  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return alternatives_[rule]; }

  // A readable listing (GBNF-like, bytes as \xHH), for debugging and tests.
  std::string ToString() const;

  // The texts of special (control) tokens the grammar may match whole, where their bytes are
  // allowed (harmony's <|channel|> in a tool call); plain tokens that spell the same bytes
  // match too, as for any literal. Other special tokens never match.
  const std::vector<std::string>& special_tokens() const { return special_tokens_; }

 private:
  friend class GrammarBuilder;
  uint32_t root_ = 0;
  std::vector<std::string> special_tokens_;
  std::vector<std::string> names_;
  std::vector<Element> elements_;
  std::vector<std::vector<uint32_t>> alternatives_;
};

// Collects rules and lowers expressions to bytes. Rules may be referenced before they are
// defined (recursion); Build checks that every referenced rule is defined.
class GrammarBuilder {
 public:
  // The rule with this name, declared (undefined) on first use. `where` describes the first
  // use for the "not defined" error (e.g. "line 3, column 7").
  uint32_t Rule(std::string_view name, std::string_view where = "");
  // A new rule with a unique name made from `hint`, undefined until Define.
  uint32_t NewRule(std::string_view hint);
  bool IsDefined(uint32_t rule) const { return defined_[rule]; }
  // Defines the rule (once): an Alt body gives one alternative per item.
  void Define(uint32_t rule, const GrammarExpr& body);
  // NewRule + Define.
  uint32_t AddRule(std::string_view hint, const GrammarExpr& body);
  // Lets the grammar match the special token whose text is `text` (Grammar::special_tokens).
  void AllowSpecialToken(std::string text) { special_tokens_.push_back(std::move(text)); }
  // Validates (undefined rules, left recursion, size bounds) and compiles.
  Grammar Build(uint32_t root) const;

 private:
  using Sequence = std::vector<Grammar::Element>;
  void Lower(const GrammarExpr& e, uint32_t owner, Sequence* out);
  uint32_t LowerChars(const GrammarExpr& e, uint32_t owner, Sequence* out);
  void CheckSize() const;

  std::vector<std::string> names_;
  std::vector<std::string> special_tokens_;
  std::vector<std::string> first_use_;
  std::vector<bool> defined_;
  std::vector<std::vector<Sequence>> rules_;
  std::unordered_map<std::string, uint32_t> by_name_;
  // One helper rule per distinct multi-sequence character class, shared by its uses.
  std::map<std::vector<std::pair<char32_t, char32_t>>, uint32_t> char_rules_;
  size_t elements_ = 0;
};

// GBNF, as llama.cpp's grammars: `name ::= alternatives` rules, "literals" with escapes
// (\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH, code points), [classes], [^negated], `.` (any
// character), ( groups ), |, * + ? {m} {m,} {m,n} {,n}, # comments. Newlines end a rule except
// inside parentheses, after `::=` or `|`, and before a line that starts with `|`. Errors name
// the line and column.
Grammar ParseGbnf(std::string_view text, std::string_view root = "root");

// A regular expression that the whole output must match: literals, escapes (\d \D \w \W \s \S
// \n \r \t \f \v \xHH \uHHHH and escaped punctuation), [classes] with ranges and escapes,
// `.` (any character but \n), groups ( ) (?: ) (?<name> ), |, * + ? {m} {m,} {m,n} (lazy
// forms match the same language), ^ and $ as anchors at the very ends only. Backreferences,
// lookaround, word boundaries, inline flags and possessive quantifiers are refused.
Grammar RegexGrammar(std::string_view pattern);

// The regex as an expression. With json_string, it matches the text of a JSON string's
// contents whose decoded value matches the pattern: `"`, `\` and control characters appear
// escaped (\" \\ \n \t \r \b \f, others \u00XX). Without `anchored`, the match may be
// surrounded by any text (JSON Schema's `pattern` searches; ^...$ make it whole).
GrammarExpr RegexExpr(GrammarBuilder& builder, std::string_view pattern, bool json_string,
                      bool anchored);

struct JsonSchemaOptions {
  // OpenAI's strict mode: every property is required and additionalProperties defaults to
  // false. Without it `required` is honoured and additionalProperties defaults to true.
  bool strict = true;
  // Without strict: whether an object whose schema does not say may hold properties it does
  // not declare (JSON Schema's default; XGrammar and vLLM default to no, as the server does).
  bool additional_properties_default = true;
  // Optional whitespace between JSON tokens: nothing, one space, or one newline followed by up
  // to max_indent spaces/tabs. Bounded, so the model cannot loop forever on whitespace.
  uint32_t max_indent = 20;
  // Compact JSON instead: no optional whitespace, one space after each ':' and ',' (as
  // Python's json.dumps writes), so a model cannot spend its tokens on whitespace.
  bool compact = false;
  // Literal text the output has before and after the JSON (a tool call's markers, say).
  std::string prefix, suffix;
};

// JSON Schema (the subset of docs/grammar.md) to a grammar of the JSON texts it accepts.
// Unsupported keywords and forms are an Error naming the keyword and its JSON pointer
// ("#/properties/x"). Properties are written in the schema's order: pass an ordered_json (parse
// the request with it); a plain json has already sorted the keys.
Grammar JsonSchemaGrammar(const nlohmann::ordered_json& schema,
                          const JsonSchemaOptions& options = {});
Grammar JsonSchemaGrammar(const nlohmann::json& schema, const JsonSchemaOptions& options = {});

// The JSON value of the sub-schema at JSON pointer `pointer` of `schema` ("": all of it; its
// $refs resolve against `schema`) as an expression in `builder`'s grammar, for grammars that
// put JSON inside other text (a tool call's markers and name). Options' prefix and suffix are
// not used. Errors as JsonSchemaGrammar's.
GrammarExpr JsonSchemaExpr(GrammarBuilder& builder, const nlohmann::ordered_json& schema,
                           const JsonSchemaOptions& options = {}, const std::string& pointer = "");
// `key` as a JSON pointer reference token (RFC 6901: '~' as "~0", '/' as "~1"), to name a
// property in JsonSchemaExpr's `pointer`.
std::string JsonPointerToken(const std::string& key);

// Any JSON object (OpenAI's response_format json_object).
Grammar JsonObjectGrammar(const JsonSchemaOptions& options = {});

}  // namespace moex

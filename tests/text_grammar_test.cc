// The grammar engine (text/grammar.h, text/grammar_matcher.h): GBNF, regex and JSON Schema
// front ends on hand-computed accept/reject strings and error messages; the matcher's token
// masks on a small hand-made vocabulary; and random walks over a JSON-schema grammar that must
// always produce JSON satisfying the schema.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/grammar.h"
#include "text/grammar_matcher.h"
#include "text/tokenizer_utf8.h"

namespace moex {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

bool Matches(const Grammar& g, std::string_view text) {
  GrammarMatcher m(std::make_shared<Grammar>(g), nullptr);
  return m.AcceptBytes(text) && m.IsComplete();
}

// The Error message of f(), or "" when it succeeds.
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_MATCH(g, s) EXPECT_TRUE(Matches(g, s)) << "should match: " << (s)
#define EXPECT_NO_MATCH(g, s) EXPECT_FALSE(Matches(g, s)) << "should not match: " << (s)

// --- GBNF -----------------------------------------------------------------------------------

TEST(GrammarGbnf, SequencesAlternativesAndRepetitions) {
  const Grammar g = ParseGbnf(R"(root ::= "a" [b-d]+ ("x" | "yz")? "!")");
  for (const char* s : {"ab!", "abcdx!", "abyz!", "addd!"}) EXPECT_MATCH(g, s);
  for (const char* s : {"a!", "abx", "abw!", "ab", "abxyz!", "Ab!", ""}) EXPECT_NO_MATCH(g, s);
}

TEST(GrammarGbnf, BoundedRepetitions) {
  const Grammar g = ParseGbnf(R"(root ::= "a"{2,3} "b"{2} "c"{1,} "d"{,2})");
  for (const char* s : {"aabbc", "aaabbccdd", "aabbcccccd"}) EXPECT_MATCH(g, s);
  for (const char* s : {"abbc", "aaaabbc", "aabbbc", "aabb", "aabbcddd"}) EXPECT_NO_MATCH(g, s);
}

TEST(GrammarGbnf, EscapesCommentsNamesAndLines) {
  const Grammar g = ParseGbnf(
      "# a comment line\n"
      "root ::= greeting-word ws (\n"
      "    \"\\n\\t\\\\\\\"\" # escapes\n"
      "  | \"\\x41\\u00e9\\U0001F600\"\n"
      ")\n"
      "greeting-word ::= \"hi\"\n"
      "  | \"yo\"\n"
      "ws ::= [ \\t]*\n");
  EXPECT_MATCH(g, "hi \n\t\\\"");
  EXPECT_MATCH(g, "yo\t\tAé😀");
  EXPECT_NO_MATCH(g, "hi A");
  EXPECT_NO_MATCH(g, "hey \n\t\\\"");
}

TEST(GrammarGbnf, CharacterClassesAreUtf8) {
  const Grammar g = ParseGbnf(R"(root ::= [α-ω]+ [^a-z] .)");
  EXPECT_MATCH(g, "αβ1x");
  EXPECT_MATCH(g, "ω€😀");
  EXPECT_NO_MATCH(g, "αa1");     // [^a-z] refuses 'a'
  EXPECT_NO_MATCH(g, "Α11");     // capital alpha is outside α-ω
  EXPECT_NO_MATCH(g, "α1\xCE");  // a cut character does not complete
  // Byte by byte: after the first byte of "β" only its continuation bytes may follow.
  GrammarMatcher m(std::make_shared<Grammar>(g), nullptr);
  EXPECT_TRUE(m.AcceptBytes("\xCE"));
  EXPECT_FALSE(m.IsComplete());
  EXPECT_FALSE(m.AcceptByte('a'));
  EXPECT_TRUE(m.AcceptByte(0xB2));  // β = CE B2
}

// Every code point's encoding is accepted by [^a], every malformed sequence refused: checks the
// UTF-8 range split on all boundaries.
TEST(GrammarGbnf, NegatedClassAcceptsExactlyValidUtf8) {
  auto g = std::make_shared<Grammar>(ParseGbnf(R"(root ::= [^a])"));
  std::vector<char32_t> points;
  for (char32_t c = 0; c <= 0x10FFFF; c += 61) points.push_back(c);
  for (char32_t c : {0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFu, 0x1000u, 0xD7FFu, 0xE000u, 0xFFFFu,
                     0x10000u, 0x3FFFFu, 0x40000u, 0xFFFFFu, 0x100000u, 0x10FFFFu}) {
    points.push_back(c);
  }
  for (char32_t c : points) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string s;
    AppendUtf8(c, &s);
    GrammarMatcher m(g, nullptr);
    EXPECT_EQ(m.AcceptBytes(s) && m.IsComplete(), c != 'a') << std::hex << uint32_t(c);
  }
  for (const char* bad : {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF", "\xED\xA0\x80",
                          "\xED\xBF\xBF", "\xF0\x80\x80\x80", "\xF0\x8F\xBF\xBF",
                          "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF", "\x80", "\xC3\xC3"}) {
    GrammarMatcher m(g, nullptr);
    EXPECT_FALSE(m.AcceptBytes(bad) && m.IsComplete()) << bad;
  }
}

TEST(GrammarGbnf, LoweringListing) {
  EXPECT_EQ(ParseGbnf(R"(root ::= "ab" [0-9] | x
x ::= "")")
                .ToString(),
            "root ::= \"a\" \"b\" [0-9] | x\nx ::= \"\"\n");
}

TEST(GrammarGbnf, ErrorsNameTheLineAndColumn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"root ::= \"a", "GBNF line 1, column 10: unterminated string literal"},
      {"root ::= foo", "rule 'foo' is used at line 1, column 10 but not defined"},
      {"a ::= \"x\"", "GBNF grammar has no rule 'root'"},
      {"root ::= \"a\"\nroot ::= \"b\"", "GBNF line 2, column 1: rule 'root' is defined twice"},
      {"root = \"a\"", "GBNF line 1, column 6: expected '::=' after rule name 'root'"},
      {"root ::= ( \"a\"\n",
       "GBNF line 2, column 1: expected ')' to close the group opened at "
       "line 1, column 10"},
      {"root ::= [b-a]", "GBNF line 1, column 11: character range is reversed"},
      {"root ::= \"x\"\n  \"\\q\"", "GBNF line 2, column 3: expected a rule name"},
      {"root ::= \"\\q\"", "GBNF line 1, column 11: unknown escape '\\q'"},
      {"root ::= \"a\"{3,2}", "GBNF line 1, column 13: repetition {3,2} has min > max"},
      {"root ::= \"a\"{1,20000}", "GBNF line 1, column 16: repetition bound over 10000"},
      {"root ::= []", "GBNF line 1, column 10: empty character class"},
      {"root ::= \"a\" )", "GBNF line 1, column 14: expected a newline or the end after the rule"},
      {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
      {"root ::= e root \"x\" | \"y\"\ne ::= \"\" | \"b\"", "rule 'root' is left-recursive"},
  };
  for (const auto& [text, message] : cases) {
    const std::string error = ErrorOf([&] { ParseGbnf(text); });
    EXPECT_NE(error.find(message), std::string::npos)
        << "grammar: " << text << "\nerror: " << error << "\nexpected: " << message;
  }
}

// A star over an expression that can be empty loops in tail position: allowed, and it ends.
TEST(GrammarGbnf, NullableStarIsNotLeftRecursion) {
  const Grammar g = ParseGbnf(R"(root ::= ("a"? "b"?)* "c")");
  for (const char* s : {"c", "abc", "aaabbc", "bac"}) EXPECT_MATCH(g, s);
  EXPECT_NO_MATCH(g, "ab");
}

TEST(GrammarMatcher, AmbiguityBoundIsAnError) {
  const std::string error = ErrorOf([] {
    GrammarMatcher m(std::make_shared<Grammar>(ParseGbnf(R"(root ::= ("a"?){0,2000} "b")")),
                     nullptr);
  });
  EXPECT_NE(error.find("grammar is too ambiguous"), std::string::npos) << error;
}

TEST(GrammarMatcher, DepthBoundDropsDeeperStacks) {
  auto g = std::make_shared<Grammar>(ParseGbnf(R"g(root ::= "(" root ")" | "x")g"));
  GrammarMatcherOptions options;
  options.max_depth = 10;
  GrammarMatcher shallow(g, nullptr, options);
  EXPECT_TRUE(shallow.AcceptBytes("((((x))))"));
  EXPECT_TRUE(shallow.IsComplete());
  GrammarMatcher deep(g, nullptr, options);
  EXPECT_FALSE(deep.AcceptBytes(std::string(15, '(')));
  GrammarMatcher unbounded(g, nullptr);
  EXPECT_TRUE(unbounded.AcceptBytes(std::string(15, '(') + "x" + std::string(15, ')')));
  EXPECT_TRUE(unbounded.IsComplete());
}

// --- Regular expressions --------------------------------------------------------------------

TEST(GrammarRegex, AcceptsAndRejects) {
  struct Case {
    const char* pattern;
    std::vector<std::string> yes, no;
  };
  const std::vector<Case> cases = {
      {"[a-z]+@[a-z]+\\.(com|org)",
       {"ab@cd.com", "x@y.org"},
       {"ab@cd.net", "@cd.com", "ab@cdxcom"}},
      {"\\d{3}-\\d{4}", {"555-1234"}, {"5551234", "55-1234", "555-12345"}},
      {"^(?:ab|c)*$", {"", "abcab", "cc"}, {"abb", "a"}},
      {"a.c", {"abc", "aéc", "a c"}, {"a\nc", "ac"}},
      {"[^\\s]+", {"x€", "ab"}, {"a b", "", "a\tb"}},
      {"\\w+\\s\\W", {"ab_1 !"}, {"ab_1 a", "ab_1!"}},
      {"a+?b|c{2,}", {"aab", "ccc"}, {"c", "b"}},
      {"(?<year>\\d{4})-[01]\\d", {"2024-12"}, {"2024-22"}},
      {"[\\d.-]+\\x41\\u00e9", {"1.-2Aé"}, {"1.-2AE"}},
      {"\\(\\)\\[\\]\\{\\}\\.\\*\\+\\?\\|\\^\\$\\\\\\/", {"()[]{}.*+?|^$\\/"}, {"x"}},
  };
  for (const Case& c : cases) {
    const Grammar g = RegexGrammar(c.pattern);
    for (const std::string& s : c.yes) EXPECT_TRUE(Matches(g, s)) << c.pattern << " on " << s;
    for (const std::string& s : c.no) EXPECT_FALSE(Matches(g, s)) << c.pattern << " on " << s;
  }
}

TEST(GrammarRegex, UnsupportedConstructsAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(a)\\1", "regex at offset 3: backreferences are not supported"},
      {"(?=a)b", "regex at offset 0: lookaround assertions are not supported"},
      {"(?<!a)b", "regex at offset 0: lookaround assertions are not supported"},
      {"a^b", "regex at offset 1: '^' is supported only at the start"},
      {"a$b", "regex at offset 1: '$' is supported only at the end"},
      {"\\bfoo", "regex at offset 0: word boundaries (\\b) are not supported"},
      {"(a", "regex at offset 0: unterminated group"},
      {"a)", "regex at offset 1: unbalanced ')'"},
      {"*a", "regex at offset 0: nothing to repeat before '*'"},
      {"a{2,1}", "regex at offset 0: repetition has min > max"},
      {"(?i)a", "regex at offset 0: group flags (?i...) are not supported"},
      {"a++", "regex at offset 2: possessive quantifiers are not supported"},
      {"\\p{L}", "regex at offset 0: Unicode property escapes are not supported"},
      {"[a", "regex at offset 0: unterminated character class"},
      {"a{1,99999}", "regex at offset 1: repetition bound over 10000"},
  };
  for (const auto& [pattern, message] : cases) {
    const std::string error = ErrorOf([&] { RegexGrammar(pattern); });
    EXPECT_NE(error.find(message), std::string::npos)
        << "pattern: " << pattern << "\nerror: " << error << "\nexpected: " << message;
  }
}

// --- JSON Schema ----------------------------------------------------------------------------

Grammar Schema(const std::string& text, bool strict = true) {
  JsonSchemaOptions options;
  options.strict = strict;
  return JsonSchemaGrammar(ordered_json::parse(text), options);
}

TEST(GrammarJsonSchema, NestedObjectsStrictInSchemaOrder) {
  const Grammar g = Schema(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"},
      "address": {"type": "object", "properties": {"city": {"type": "string"}}}}})");
  EXPECT_MATCH(g, R"({"name":"Bo","age":3,"address":{"city":"X"}})");
  EXPECT_MATCH(g, "{ \"name\" : \"Bo\",\n  \"age\": -3,\n\t\"address\": {\"city\": \"\"}\n}");
  EXPECT_NO_MATCH(g, R"({"name":"Bo"})");                                 // all required
  EXPECT_NO_MATCH(g, R"({"age":3,"name":"Bo","address":{"city":"X"}})");  // schema order
  EXPECT_NO_MATCH(g, R"({"name":"Bo","age":3,"address":{"city":"X"},"x":1})");
  EXPECT_NO_MATCH(g, R"({"name":"Bo","age":3.5,"address":{"city":"X"}})");
  EXPECT_NO_MATCH(g, R"({"name":"Bo","age":3,"address":{"city":"X"}} )");
  // Whitespace is bounded: one space, or a newline and up to 20 spaces/tabs.
  EXPECT_NO_MATCH(g, R"({  "name":"Bo","age":3,"address":{"city":"X"}})");
  EXPECT_MATCH(g, "{\n" + std::string(20, ' ') + R"("name":"Bo","age":3,"address":{"city":"X"}})");
  EXPECT_NO_MATCH(g,
                  "{\n" + std::string(21, ' ') + R"("name":"Bo","age":3,"address":{"city":"X"}})");
}

TEST(GrammarJsonSchema, RequiredAndAdditionalPropertiesWhenNotStrict) {
  const Grammar g = Schema(R"({"type": "object", "required": ["name"], "properties": {
      "id": {"type": "integer"}, "name": {"type": "string"}, "ok": {"type": "boolean"}}})",
                           false);
  for (const char* s :
       {R"({"name":"a"})", R"({"id":1,"name":"a"})", R"({"name":"a","ok":true})",
        R"({"id":1,"name":"a","ok":false,"zz":[1,{}]})", R"({"name":"a","q":null})"}) {
    EXPECT_MATCH(g, s);
  }
  for (const char* s :
       {R"({})", R"({"id":1})", R"({"ok":true,"name":"a"})", R"({"zz":1,"name":"a"})"}) {
    EXPECT_NO_MATCH(g, s);
  }
  const Grammar closed = Schema(R"({"type": "object", "additionalProperties": false,
      "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})",
                                false);
  for (const char* s : {"{}", R"({"a":1})", R"({"b":2})", R"({"a":1,"b":2})"}) {
    EXPECT_MATCH(closed, s);
  }
  for (const char* s : {R"({"c":1})", R"({"a":1,"c":1})", R"({,"b":2})", R"({"a":1,})"}) {
    EXPECT_NO_MATCH(closed, s);
  }
  const Grammar typed_extra =
      Schema(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_MATCH(typed_extra, R"({"x":1,"y":2})");
  EXPECT_MATCH(typed_extra, "{}");
  EXPECT_NO_MATCH(typed_extra, R"({"x":"1"})");
}

TEST(GrammarJsonSchema, Arrays) {
  const Grammar g =
      Schema(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})");
  for (const char* s : {"[1]", "[1,2,3]", "[1, 2]", "[ 1 ,\n 2 ]"}) EXPECT_MATCH(g, s);
  for (const char* s : {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"}) EXPECT_NO_MATCH(g, s);
  const Grammar tuple = Schema(
      R"({"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"items":false})");
  for (const char* s : {"[]", R"(["a"])", R"(["a",true])"}) EXPECT_MATCH(tuple, s);
  for (const char* s : {R"(["a",true,1])", "[true]", R"(["a","b"])"}) EXPECT_NO_MATCH(tuple, s);
  const Grammar rest = Schema(
      R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"null"},"minItems":2})");
  for (const char* s : {R"(["a",null])", R"(["a",null,null])"}) EXPECT_MATCH(rest, s);
  for (const char* s : {R"(["a"])", R"(["a",1])", "[]"}) EXPECT_NO_MATCH(rest, s);
}

TEST(GrammarJsonSchema, EnumConstAnyOfAndTypeArrays) {
  const Grammar e = Schema(R"({"enum":["red","gr\"een",1,null,{"a":[true]}]})");
  for (const char* s : {R"("red")", R"("gr\"een")", "1", "null", R"({"a":[true]})"}) {
    EXPECT_MATCH(e, s);
  }
  for (const char* s : {R"("blue")", "2", R"("Red")"}) EXPECT_NO_MATCH(e, s);
  const Grammar c = Schema(R"({"const":"x"})");
  EXPECT_MATCH(c, R"("x")");
  EXPECT_NO_MATCH(c, R"("y")");
  const Grammar any = Schema(
      R"({"anyOf":[{"type":"string","maxLength":1},{"type":"integer","minimum":0,"maximum":10}]})");
  for (const char* s : {R"("x")", "7", "0", "10"}) EXPECT_MATCH(any, s);
  for (const char* s : {"11", "-1", R"("xy")", "true"}) EXPECT_NO_MATCH(any, s);
  const Grammar nullable = Schema(R"({"type":["boolean","null"]})");
  for (const char* s : {"true", "false", "null"}) EXPECT_MATCH(nullable, s);
  EXPECT_NO_MATCH(nullable, "0");
}

TEST(GrammarJsonSchema, IntegerRangesExactly) {
  const std::vector<std::pair<std::string, std::function<bool(int)>>> cases = {
      {R"("minimum":-15,"maximum":123)", [](int v) { return v >= -15 && v <= 123; }},
      {R"("minimum":7,"maximum":7)", [](int v) { return v == 7; }},
      {R"("minimum":0,"maximum":1000)", [](int v) { return v >= 0 && v <= 1000; }},
      {R"("minimum":-100,"maximum":-3)", [](int v) { return v >= -100 && v <= -3; }},
      {R"("minimum":95)", [](int v) { return v >= 95; }},
      {R"("maximum":-5)", [](int v) { return v <= -5; }},
      {R"("exclusiveMinimum":9,"exclusiveMaximum":200)", [](int v) { return v > 9 && v < 200; }},
      {R"("minimum":1.5,"maximum":19.5)", [](int v) { return v >= 2 && v <= 19; }},
  };
  for (const auto& [bounds, in] : cases) {
    auto g = std::make_shared<Grammar>(Schema(R"({"type":"integer",)" + bounds + "}"));
    for (int v = -1200; v <= 1200; ++v) {
      GrammarMatcher m(g, nullptr);
      const bool ok = m.AcceptBytes(std::to_string(v)) && m.IsComplete();
      ASSERT_EQ(ok, in(v)) << bounds << " on " << v;
    }
    EXPECT_FALSE(Matches(*g, "007"));
    EXPECT_FALSE(Matches(*g, "-0"));
  }
}

TEST(GrammarJsonSchema, RecursiveRefs) {
  const Grammar g = Schema(R"({"$defs": {"node": {"type": "object", "properties": {
      "value": {"type": "integer"},
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
      "$ref": "#/$defs/node"})");
  EXPECT_MATCH(
      g,
      R"({"value":1,"children":[{"value":2,"children":[]},{"value":3,"children":[{"value":4,"children":[]}]}]})");
  EXPECT_NO_MATCH(g, R"({"value":1,"children":[{"value":2}]})");
  const Grammar old = Schema(R"({"definitions": {"s": {"type": "string"}},
      "type": "array", "items": {"$ref": "#/definitions/s"}})");
  EXPECT_MATCH(old, R"(["a","b"])");
  EXPECT_NO_MATCH(old, "[1]");
  const Grammar self = Schema(R"({"type": "array", "maxItems": 2, "items": {"$ref": "#"}})");
  EXPECT_MATCH(self, "[[],[[],[]]]");
  EXPECT_NO_MATCH(self, "[[],[],[]]");
}

TEST(GrammarJsonSchema, StringsFormatsAndPatterns) {
  const Grammar len = Schema(R"({"type":"string","minLength":2,"maxLength":3})");
  for (const char* s : {R"("ab")", R"("abc")", R"("a\n")", R"("é€")", R"("\u00e9x")"}) {
    EXPECT_MATCH(len, s);
  }
  for (const char* s : {R"("a")", R"("abcd")", "\"a\nb\"", R"("\ud800x")", R"("a\q")"}) {
    EXPECT_NO_MATCH(len, s);
  }
  const Grammar date = Schema(R"({"type":"string","format":"date"})");
  EXPECT_MATCH(date, R"("2024-02-29")");
  for (const char* s : {R"("2024-13-01")", R"("2024-00-10")", R"("2024-01-32")", R"("24-01-01")"}) {
    EXPECT_NO_MATCH(date, s);
  }
  const Grammar time = Schema(R"({"type":"string","format":"time"})");
  for (const char* s : {R"("12:30:00Z")", R"("23:59:59.123+02:00")"}) EXPECT_MATCH(time, s);
  for (const char* s : {R"("24:00:00Z")", R"("12:60:00Z")", R"("12:30:00")"}) {
    EXPECT_NO_MATCH(time, s);
  }
  const Grammar date_time = Schema(R"({"type":"string","format":"date-time"})");
  EXPECT_MATCH(date_time, R"("2024-05-01T08:00:00-05:30")");
  EXPECT_NO_MATCH(date_time, R"("2024-05-01 08:00:00Z")");
  const Grammar uuid = Schema(R"({"type":"string","format":"uuid"})");
  EXPECT_MATCH(uuid, R"("123e4567-e89b-12d3-A456-426614174000")");
  EXPECT_NO_MATCH(uuid, R"("123e4567-e89b-12d3-a456-42661417400")");
  const Grammar anchored = Schema(R"({"type":"string","pattern":"^[A-Z]{2}\\d$"})");
  EXPECT_MATCH(anchored, R"("AB1")");
  for (const char* s : {R"("ab1")", R"("xAB1")", R"("AB12")"}) EXPECT_NO_MATCH(anchored, s);
  const Grammar search = Schema(R"({"type":"string","pattern":"ab"})");
  for (const char* s : {R"("ab")", R"("xxabyy")", R"("\"ab\\")"}) EXPECT_MATCH(search, s);
  EXPECT_NO_MATCH(search, R"("xy")");
  // Characters a JSON string must escape are matched in their escaped form.
  const Grammar quote = Schema(R"({"type":"string","pattern":"^a\"\\\\\\n$"})");
  EXPECT_MATCH(quote, R"("a\"\\\n")");
  EXPECT_NO_MATCH(quote, "\"a\"\\\n\"");
}

TEST(GrammarJsonSchema, Numbers) {
  const Grammar g = Schema(R"({"type":"number"})");
  for (const char* s : {"0", "-0.5e+10", "12.25", "3E7", "-7"}) EXPECT_MATCH(g, s);
  for (const char* s : {"01", "1.", ".5", "+1", "1e", "--1", "1e123"}) EXPECT_NO_MATCH(g, s);
}

TEST(GrammarJsonSchema, UnsupportedKeywordsNameTheirPath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"not":{}})", "JSON schema keyword 'not' at # is not supported"},
      {R"({"type":"object","properties":{"a":{"type":"string","if":{}}}})",
       "JSON schema keyword 'if' at #/properties/a is not supported"},
      {R"({"patternProperties":{}})", "keyword 'patternProperties' at # is not supported"},
      {R"({"type":"array","items":{"uniqueItems":true}})",
       "keyword 'uniqueItems' at #/items is not supported"},
      {R"({"type":"object","properties":{"a/b":{"not":1}}})",
       "keyword 'not' at #/properties/a~1b is not supported"},
      {R"({"type":"string","format":"email"})", "format 'email' at # is not supported"},
      {R"({"type":"number","minimum":0})",
       "keyword 'minimum' at # is supported only for type integer"},
      {R"({"allOf":[{},{}]})", "'allOf' at # is supported only with one schema"},
      {R"({"$ref":"http://x"})", "'$ref' at #/$ref is not local"},
      {R"({"$ref":"#/$defs/missing"})", "('#/$defs/missing') points to nothing"},
      {R"({"type":"foo"})", "type 'foo' at # is not a JSON Schema type"},
      {R"({"type":"string","maxLength":20000})", "'maxLength' at # is 20000, over the supported"},
      {R"({"type":"integer","minimum":1e300})", "'minimum' at # is beyond"},
      {R"({"anyOf":[{"type":"string"}],"type":"string"})", "keyword 'type' next to 'anyOf' at #"},
      {R"({"type":"array","prefixItems":[{"const":1},{"multipleOf":2}]})",
       "keyword 'multipleOf' at #/prefixItems/1 is not supported"},
      {R"({"$defs":{"x":{"type":"string","contains":1}},"$ref":"#/$defs/x"})",
       "keyword 'contains' at #/$defs/x is not supported"},
      {R"({"type":"object","required":["b"],"properties":{"a":{}}})",
       "'required' at # names 'b', which is not in 'properties'"},
      {"false", "JSON schema at # is false"},
  };
  for (const auto& [schema, message] : cases) {
    const std::string error = ErrorOf([&] { Schema(schema); });
    EXPECT_NE(error.find(message), std::string::npos)
        << "schema: " << schema << "\nerror: " << error << "\nexpected: " << message;
  }
}

TEST(GrammarJsonSchema, JsonObjectMode) {
  const Grammar g = JsonObjectGrammar();
  for (const char* s : {"{}", R"({"a":[1,{"b":null}],"c":"d"})", "{ \"a\" : -1.5e3 }"}) {
    EXPECT_MATCH(g, s);
  }
  for (const char* s : {"[]", "1", R"({"a"})", R"({"a":1,})", R"({'a':1})"}) EXPECT_NO_MATCH(g, s);
}

// Compact JSON: one space after ':' and ',', none anywhere else, in objects and arrays of a
// schema and in any JSON value.
TEST(GrammarJsonSchema, CompactJsonHasNoOptionalWhitespace) {
  JsonSchemaOptions options;
  options.compact = true;
  const Grammar g = JsonSchemaGrammar(
      ordered_json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"},
          "b": {"type": "array", "items": {}}}})"),
      options);
  EXPECT_MATCH(g, R"({"a": 1, "b": [2, {"c": [true, null]}, []]})");
  EXPECT_MATCH(g, R"({"a": 1, "b": []})");
  for (const char* s : {R"({"a":1, "b": []})", R"({"a": 1,"b": []})", R"({ "a": 1, "b": []})",
                        R"({"a": 1, "b": [] })", R"({"a": 1, "b": [2,3]})",
                        R"({"a": 1, "b": [{"c":1}]})", "{\"a\": 1,\n\"b\": []}"}) {
    EXPECT_NO_MATCH(g, s);
  }
  const Grammar any = JsonObjectGrammar(options);
  EXPECT_MATCH(any, "{}");
  EXPECT_MATCH(any, R"({"k": [1, 2], "m": {}})");
  EXPECT_NO_MATCH(any, "{ }");
  EXPECT_NO_MATCH(any, R"({"k":[1, 2]})");
}

// The plain-json overload sorts the keys (nlohmann::json is a std::map).
TEST(GrammarJsonSchema, PlainJsonUsesKeyOrder) {
  const Grammar g = JsonSchemaGrammar(json::parse(
      R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"integer"}}})"));
  EXPECT_MATCH(g, R"({"a":1,"b":2})");
  EXPECT_NO_MATCH(g, R"({"b":2,"a":1})");
}

// --- Matcher and token masks ----------------------------------------------------------------

// Ids of the hand-made vocabulary.
enum : int32_t {
  kOpenQuote,   // {"
  kQuoteColon,  // ":
  kQuoteComma,  // ",
  kQuote,       // "
  kOpen,        // {
  kClose,       // }
  kA,           // a
  kName,        // name
  kSpace,       // ' '
  kOne,         // 1
  kTwelve,      // 12
  kEFirst,      // \xC3, the first byte of é
  kESecond,     // \xA9, its second byte
  kE,           // é
  kEos,         // <eos>, special
  kEmpty,       // (empty)
  kQuoteClose,  // "}
  kX,           // x
  kColon,       // :
  kWhole,       // {"name":"
  kVocab
};

std::shared_ptr<const TokenTrie> HandVocabulary() {
  std::vector<std::string> t = {"{\"",   "\":", "\",", "\"", "{",    "}",           "a",
                                "name",  " ",   "1",   "12", "\xC3", "\xA9",        "\xC3\xA9",
                                "<eos>", "",    "\"}", "x",  ":",    "{\"name\":\""};
  std::vector<bool> special(t.size(), false);
  special[kEos] = true;
  return std::make_shared<TokenTrie>(t, special);
}

TEST(GrammarMatcher, MasksOnAHandMadeVocabulary) {
  auto trie = HandVocabulary();
  ASSERT_EQ(trie->vocab_size(), kVocab);
  auto g = std::make_shared<Grammar>(
      Schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":3}}})"));
  GrammarMatcher m(g, trie);
  using Ids = std::vector<int32_t>;
  EXPECT_EQ(m.AllowedTokens(), (Ids{kOpenQuote, kOpen, kWhole}));
  EXPECT_FALSE(m.AcceptToken(kEos));
  EXPECT_FALSE(m.AcceptToken(kEmpty));
  EXPECT_FALSE(m.AcceptToken(kQuote));
  ASSERT_TRUE(m.AcceptToken(kOpenQuote));
  EXPECT_EQ(m.AllowedTokens(), (Ids{kName}));
  ASSERT_TRUE(m.AcceptToken(kName));
  EXPECT_EQ(m.AllowedTokens(), (Ids{kQuoteColon, kQuote}));
  ASSERT_TRUE(m.AcceptToken(kQuoteColon));
  // A string may open with any character, the quote of `":` and `",` included.
  EXPECT_EQ(m.AllowedTokens(), (Ids{kQuoteColon, kQuoteComma, kQuote, kSpace, kQuoteClose}));
  ASSERT_TRUE(m.AcceptToken(kQuote));
  // Inside the string: any character (not a lone continuation byte, nor a 4-character token);
  // `{"` closes the string after `{`; `",` cannot follow the last property.
  EXPECT_EQ(m.AllowedTokens(), (Ids{kOpenQuote, kQuote, kOpen, kClose, kA, kSpace, kOne, kTwelve,
                                    kEFirst, kE, kQuoteClose, kX, kColon}));
  ASSERT_TRUE(m.AcceptToken(kEFirst));  // A token that ends inside a character.
  EXPECT_EQ(m.AllowedTokens(), (Ids{kESecond}));
  ASSERT_TRUE(m.AcceptToken(kESecond));
  ASSERT_TRUE(m.AcceptToken(kTwelve));  // Three characters: the string must close.
  EXPECT_EQ(m.AllowedTokens(), (Ids{kQuote, kQuoteClose}));
  EXPECT_FALSE(m.IsComplete());
  ASSERT_TRUE(m.AcceptToken(kQuoteClose));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_FALSE(m.CanContinue());
  EXPECT_EQ(m.AllowedTokens(), Ids{});
  EXPECT_FALSE(m.AcceptToken(kSpace));
}

TEST(GrammarMatcher, CopiesAreIndependentAndShareTheCache) {
  auto trie = HandVocabulary();
  auto g = std::make_shared<Grammar>(ParseGbnf(R"(root ::= "{" [a-z1]* "}")"));
  GrammarMatcher a(g, trie);
  ASSERT_TRUE(a.AcceptToken(kOpen));
  GrammarMatcher b = a;
  ASSERT_TRUE(b.AcceptToken(kClose));
  EXPECT_TRUE(b.IsComplete());
  EXPECT_FALSE(a.IsComplete());
  ASSERT_TRUE(a.AcceptToken(kA));
  std::vector<uint64_t> first, second;
  a.FillMask(&first);
  const auto before = a.stats();
  ASSERT_TRUE(a.AcceptToken(kX));  // Same state: [a-z1]* loops.
  a.FillMask(&second);
  EXPECT_EQ(first, second);
  EXPECT_EQ(a.stats().mask_hits, before.mask_hits + 1);
  b.Reset();
  EXPECT_FALSE(b.IsComplete());
  EXPECT_TRUE(b.AcceptToken(kOpen));
  EXPECT_TRUE(GrammarMatcher::Allows(first, kClose));
  EXPECT_FALSE(GrammarMatcher::Allows(first, kOpen));
  EXPECT_FALSE(a.AcceptBytes("a{"));  // All or nothing: the state is unchanged.
  EXPECT_TRUE(a.AcceptBytes("a}"));
}

// --- Random walks over a JSON-schema grammar ------------------------------------------------

// A small validator for the subset the walk's schema uses.
bool Valid(const json& v, const json& s, const json& root) {
  if (s.contains("$ref")) {
    return Valid(v, root.at(json::json_pointer(s["$ref"].get<std::string>().substr(1))), root);
  }
  if (s.contains("anyOf")) {
    for (const json& alt : s["anyOf"]) {
      if (Valid(v, alt, root)) return true;
    }
    return false;
  }
  if (s.contains("enum")) {
    for (const json& e : s["enum"]) {
      if (e == v) return true;
    }
    return false;
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string()) {
      types.push_back(s["type"]);
    } else {
      for (const json& t : s["type"]) types.push_back(t);
    }
    bool ok = false;
    for (const std::string& t : types) {
      ok = ok || (t == "null" && v.is_null()) || (t == "boolean" && v.is_boolean()) ||
           (t == "integer" && v.is_number_integer()) || (t == "number" && v.is_number()) ||
           (t == "string" && v.is_string()) || (t == "array" && v.is_array()) ||
           (t == "object" && v.is_object());
    }
    if (!ok) return false;
  }
  if (v.is_number_integer()) {
    if (s.contains("minimum") && v.get<int64_t>() < s["minimum"].get<int64_t>()) return false;
    if (s.contains("maximum") && v.get<int64_t>() > s["maximum"].get<int64_t>()) return false;
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    size_t chars = 0;
    for (size_t pos = 0; pos < str.size();) {
      char32_t cp;
      if (!DecodeUtf8(str, &pos, &cp)) return false;
      ++chars;
    }
    if (s.contains("minLength") && chars < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && chars > s["maxLength"].get<size_t>()) return false;
    if (s.contains("format") && s["format"] == "date" &&
        !std::regex_match(str, std::regex(R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"))) {
      return false;
    }
    if (s.contains("pattern") &&
        !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) {
      return false;
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items")) {
      for (const json& item : v) {
        if (!Valid(item, s["items"], root)) return false;
      }
    }
  }
  if (v.is_object() && s.contains("properties")) {
    // Strict: exactly the declared properties.
    if (v.size() != s["properties"].size()) return false;
    for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
      if (!v.contains(it.key()) || !Valid(v[it.key()], it.value(), root)) return false;
    }
  }
  return true;
}

// All 256 single bytes (so every state can go on), JSON pieces, words and multi-byte pieces.
std::shared_ptr<const TokenTrie> WalkVocabulary(std::vector<std::string>* tokens) {
  for (int b = 0; b < 256; ++b) tokens->push_back(std::string(1, char(b)));
  for (const char* t :
       {"{\"",    "\":",      "\",",    "\"}",      "\"]",      "[{",    "}]",      "},",
        "\":\"",  "\": ",     ", \"",   "true",     "false",    "null",  "12",      "2024",
        "-0",     "-",        "01",     "\\n",      "\\u00",    "\\ud8", "é",       "\xC3",
        "€",      "\xE2\x82", "😀",      "\xF0\x9F", "\x98\x80", " the",  " name",   "name",
        "tags",   "kind",     "count",  "when",     "meta",     "id",    "score",   "children",
        "note",   "\n  ",     "  ",     "\": [",    "red",      "green", "\"red\"", "-12-",
        "-01-31", "\u00a0",   "<|eos|>"}) {
    tokens->push_back(t);
  }
  std::vector<bool> special(tokens->size(), false);
  special.back() = true;
  return std::make_shared<TokenTrie>(*tokens, special);
}

TEST(GrammarMatcher, RandomWalksProduceValidJson) {
  const std::string schema_text = R"({
    "$defs": {"child": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": -5, "maximum": 250},
        "children": {"type": "array", "maxItems": 1, "items": {"$ref": "#/$defs/child"}}}}},
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 12},
      "kind": {"enum": ["red", "green", 7, null]},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1,
               "maxItems": 3},
      "when": {"type": "string", "format": "date"},
      "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{1,3}$"},
      "score": {"anyOf": [{"type": "number"}, {"type": "boolean"}]},
      "note": {"type": ["string", "null"], "maxLength": 5},
      "meta": {"type": "object", "properties": {"count": {"type": "integer"},
                                                "ok": {"type": "boolean"}}},
      "tree": {"$ref": "#/$defs/child"}
    }})";
  const ordered_json schema = ordered_json::parse(schema_text);
  const json plain_schema = json::parse(schema_text);
  auto g = std::make_shared<Grammar>(JsonSchemaGrammar(schema));
  std::vector<std::string> tokens;
  auto trie = WalkVocabulary(&tokens);
  GrammarMatcher prototype(g, trie);
  // A matcher that rebuilds its states all the time must give the same masks.
  GrammarMatcherOptions tiny;
  tiny.max_states = 8;
  tiny.mask_cache_bytes = 256;
  GrammarMatcher rebuilding(g, trie, tiny);
  std::mt19937 rng(1234);
  int64_t total_tokens = 0;
  for (int walk = 0; walk < 60; ++walk) {
    GrammarMatcher m = prototype;
    GrammarMatcher r = rebuilding;
    std::string text;
    std::vector<uint64_t> mask;
    int steps = 0;
    while (!m.IsComplete()) {
      ASSERT_LT(++steps, 4000) << "walk did not end: " << text;
      m.FillMask(&mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < trie->vocab_size(); ++id) {
        if (GrammarMatcher::Allows(mask, id)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty()) << "dead end after: " << text;
      if (walk < 10) {
        std::vector<uint64_t> other;
        r.FillMask(&other);
        ASSERT_EQ(mask, other) << "after: " << text;
      }
      // Every allowed token is accepted; a sample of refused ones is refused.
      const int32_t pick = allowed[rng() % allowed.size()];
      const int32_t refused = int32_t(rng() % trie->vocab_size());
      if (!GrammarMatcher::Allows(mask, refused)) {
        GrammarMatcher probe = m;
        ASSERT_FALSE(probe.AcceptToken(refused)) << "token " << refused << " after " << text;
      }
      ASSERT_TRUE(m.AcceptToken(pick));
      if (walk < 10) {
        ASSERT_TRUE(r.AcceptToken(pick));
      }
      text += tokens[pick];
      ++total_tokens;
    }
    json value;
    ASSERT_NO_THROW(value = json::parse(text)) << text;
    EXPECT_TRUE(Valid(value, plain_schema, plain_schema)) << text;
  }
  EXPECT_GT(total_tokens, 1000);
  EXPECT_GT(rebuilding.stats().rebuilds, 0u);
}

}  // namespace
}  // namespace moex

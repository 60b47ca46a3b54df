// The JSON Schema front end (text/grammar.h). Each schema node becomes an expression; objects,
// arrays and $ref targets become rules so a node is lowered once however often it is used.
// Every keyword is either handled, ignored (annotations) or refused with its JSON pointer.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/grammar.h"

namespace moex {
namespace {

using Json = nlohmann::ordered_json;
using E = GrammarExpr;
using Ranges = std::vector<std::pair<char32_t, char32_t>>;

constexpr int64_t kMaxIntBound = 1000000000000000;  // 10^15: 16 digits at most
constexpr uint32_t kMaxIntDigits = 16;

const std::set<std::string> kIgnored = {"description", "title",     "default",  "examples",
                                        "$schema",     "$id",       "$comment", "deprecated",
                                        "readOnly",    "writeOnly", "$defs",    "definitions"};
const std::set<std::string> kHandled = {"type",
                                        "properties",
                                        "required",
                                        "additionalProperties",
                                        "enum",
                                        "const",
                                        "anyOf",
                                        "oneOf",
                                        "allOf",
                                        "items",
                                        "prefixItems",
                                        "minItems",
                                        "maxItems",
                                        "minLength",
                                        "maxLength",
                                        "pattern",
                                        "format",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum",
                                        "$ref"};

// A readable rule name (names only show in Grammar::ToString).
std::string RuleName(std::string name) {
  for (char& c : name) {
    if (!std::isalnum(uint8_t(c))) c = '-';
  }
  return name.empty() ? "prop" : name;
}

std::string At(const std::string& path) {
  return "#" + path;
}

E Lit(std::string s) {
  return E::Literal(std::move(s));
}
E Range(char32_t lo, char32_t hi) {
  return E::Chars({{lo, hi}});
}
E Opt(E e) {
  return E::Repeat(std::move(e), 0, 1);
}

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& builder, const Json& root, const JsonSchemaOptions& options)
      : root_(root), options_(options), b_(builder) {}

  Grammar Build() {
    const uint32_t root = b_.Rule("root");
    if (options_.prefix.empty() && options_.suffix.empty()) {
      refs_[""] = root;
      b_.Define(root, Schema(root_, ""));
      return b_.Build(root);
    }
    // "$ref": "#" names the JSON value, not the text around it.
    const uint32_t value = b_.NewRule("value");
    refs_[""] = value;
    b_.Define(value, Schema(root_, ""));
    b_.Define(root, E::Seq({Lit(options_.prefix), E::Ref(value), Lit(options_.suffix)}));
    return b_.Build(root);
  }

  // The value at `pointer` ("" for the whole schema) as a reference to its rule; options'
  // prefix and suffix are not used.
  E Value(const std::string& pointer) { return E::Ref(Reference(Json("#" + pointer), "")); }

  Grammar BuildAnyObject() {
    const uint32_t root = b_.Rule("root");
    b_.Define(root, E::Ref(AnyObject()));
    return b_.Build(root);
  }

 private:
  // Optional whitespace: nothing, a space, or a newline and up to max_indent spaces/tabs;
  // none in compact JSON.
  E Ws() {
    if (options_.compact) return E::Empty();
    if (!ws_) {
      const E indent = E::Repeat(E::Chars({{' ', ' '}, {'\t', '\t'}}), 0, options_.max_indent);
      ws_ = b_.AddRule("ws", Opt(E::Alt({Lit(" "), E::Seq({Lit("\n"), indent})})));
    }
    return E::Ref(*ws_);
  }

  // ws "," ws and ws ":" ws; compact JSON has one space after each.
  E Comma() { return options_.compact ? Lit(", ") : E::Seq({Ws(), Lit(","), Ws()}); }
  E Colon() { return options_.compact ? Lit(": ") : E::Seq({Ws(), Lit(":"), Ws()}); }

  E Hex() { return E::Chars({{'0', '9'}, {'A', 'F'}, {'a', 'f'}}); }

  // One character of a JSON string's text: raw, or an escape (no lone surrogates: a \u escape
  // of D800-DFFF is left out, a decoder would refuse it unpaired).
  E StringChar() {
    if (!string_char_) {
      const E raw = E::Chars({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
      const E hex4 =
          E::Alt({E::Seq({E::Chars({{'0', '9'}, {'A', 'C'}, {'E', 'F'}, {'a', 'c'}, {'e', 'f'}}),
                          Hex(), Hex(), Hex()}),
                  E::Seq({E::Chars({{'D', 'D'}, {'d', 'd'}}), Range('0', '7'), Hex(), Hex()})});
      const E escape = E::Seq({Lit("\\"), E::Alt({E::Chars({{'"', '"'},
                                                            {'\\', '\\'},
                                                            {'/', '/'},
                                                            {'b', 'b'},
                                                            {'f', 'f'},
                                                            {'n', 'n'},
                                                            {'r', 'r'},
                                                            {'t', 't'}}),
                                                  E::Seq({Lit("u"), hex4})})});
      string_char_ = b_.AddRule("char", E::Alt({raw, escape}));
    }
    return E::Ref(*string_char_);
  }

  E AnyString() {
    if (!any_string_) {
      any_string_ = b_.AddRule(
          "string", E::Seq({Lit("\""), E::Repeat(StringChar(), 0, E::kUnbounded), Lit("\"")}));
    }
    return E::Ref(*any_string_);
  }

  E Digits(uint32_t min, uint32_t max) { return E::Repeat(Range('0', '9'), min, max); }

  // -?(0|[1-9][0-9]{0,15}): bounded, so the model cannot write digits forever.
  E AnyInteger() {
    if (!any_integer_) {
      any_integer_ = b_.AddRule(
          "integer",
          E::Seq({Opt(Lit("-")),
                  E::Alt({Lit("0"), E::Seq({Range('1', '9'), Digits(0, kMaxIntDigits - 1)})})}));
    }
    return E::Ref(*any_integer_);
  }

  E AnyNumber() {
    if (!any_number_) {
      any_number_ = b_.AddRule(
          "number", E::Seq({AnyInteger(), Opt(E::Seq({Lit("."), Digits(1, 16)})),
                            Opt(E::Seq({E::Chars({{'E', 'E'}, {'e', 'e'}}),
                                        Opt(E::Chars({{'+', '+'}, {'-', '-'}})), Digits(1, 2)}))}));
    }
    return E::Ref(*any_number_);
  }

  uint32_t AnyObject() {
    if (!any_object_) {
      any_object_ = b_.NewRule("object");
      const E member = E::Seq({AnyString(), Colon(), AnyValue()});
      b_.Define(
          *any_object_,
          E::Seq({Lit("{"), Ws(),
                  E::Alt({Lit("}"),
                          E::Seq({member, E::Repeat(E::Seq({Comma(), member}), 0, E::kUnbounded),
                                  Ws(), Lit("}")})})}));
    }
    return *any_object_;
  }

  uint32_t AnyArray() {
    if (!any_array_) {
      any_array_ = b_.NewRule("array");
      b_.Define(*any_array_,
                E::Seq({Lit("["), Ws(),
                        E::Alt({Lit("]"),
                                E::Seq({AnyValue(),
                                        E::Repeat(E::Seq({Comma(), AnyValue()}), 0, E::kUnbounded),
                                        Ws(), Lit("]")})})}));
    }
    return *any_array_;
  }

  E AnyValue() {
    if (!any_value_) {
      any_value_ = b_.NewRule("value");
      b_.Define(*any_value_, E::Alt({E::Ref(AnyObject()), E::Ref(AnyArray()), AnyString(),
                                     AnyNumber(), Lit("true"), Lit("false"), Lit("null")}));
    }
    return E::Ref(*any_value_);
  }

  void CheckKeywords(const Json& s, const std::string& path) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!kIgnored.count(it.key()) && !kHandled.count(it.key())) {
        Fail("JSON schema keyword '", it.key(), "' at ", At(path), " is not supported");
      }
    }
  }

  // Keywords other than annotations next to `keyword` are refused (no intersection of schemas).
  void CheckAlone(const Json& s, const std::string& path, const char* keyword) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != keyword && !kIgnored.count(it.key())) {
        Fail("JSON schema keyword '", it.key(), "' next to '", keyword, "' at ", At(path),
             " is not supported");
      }
    }
  }

  E Schema(const Json& s, const std::string& path) {
    struct Nest {
      int* depth;
      explicit Nest(int* d) : depth(d) { ++*depth; }
      ~Nest() { --*depth; }
    } nest(&depth_);
    if (depth_ > kGrammarMaxNesting) {
      Fail("JSON schema at ", At(path), " nests deeper than ", kGrammarMaxNesting);
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return AnyValue();
      Fail("JSON schema at ", At(path), " is false: it matches nothing");
    }
    if (!s.is_object()) Fail("JSON schema at ", At(path), " is not an object");
    CheckKeywords(s, path);
    if (s.contains("$ref")) {
      CheckAlone(s, path, "$ref");
      return E::Ref(Reference(s["$ref"], path + "/$ref"));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      CheckAlone(s, path, key);
      const Json& list = s[key];
      if (!list.is_array() || list.empty()) {
        Fail("JSON schema '", key, "' at ", At(path), " must be a non-empty array");
      }
      std::vector<E> alternatives;
      for (size_t i = 0; i < list.size(); ++i) {
        alternatives.push_back(Schema(list[i], path + "/" + key + "/" + std::to_string(i)));
      }
      return E::Alt(std::move(alternatives));
    }
    if (s.contains("allOf")) {
      CheckAlone(s, path, "allOf");
      const Json& list = s["allOf"];
      if (!list.is_array() || list.size() != 1) {
        Fail("JSON schema 'allOf' at ", At(path), " is supported only with one schema");
      }
      return Schema(list[0], path + "/allOf/0");
    }
    if (s.contains("const")) return Lit(s["const"].dump());
    if (s.contains("enum")) {
      const Json& list = s["enum"];
      if (!list.is_array() || list.empty()) {
        Fail("JSON schema 'enum' at ", At(path), " must be a non-empty array");
      }
      std::vector<E> alternatives;
      for (const Json& v : list) alternatives.push_back(Lit(v.dump()));
      return E::Alt(std::move(alternatives));
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string()) Fail("JSON schema 'type' at ", At(path), " must hold strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        Fail("JSON schema 'type' at ", At(path), " must be a string or an array of strings");
      }
    } else {
      auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys) {
          if (s.contains(k)) return true;
        }
        return false;
      };
      if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
      if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) {
        Fail("JSON schema at ", At(path), ": 'minimum'/'maximum' need \"type\": \"integer\"");
      }
      if (types.empty()) return AnyValue();
    }
    std::vector<E> alternatives;
    for (const std::string& type : types) alternatives.push_back(Typed(s, type, path));
    return E::Alt(std::move(alternatives));
  }

  uint32_t Reference(const Json& ref, const std::string& path) {
    if (!ref.is_string()) Fail("JSON schema '$ref' at ", At(path), " must be a string");
    const std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#') {
      Fail("JSON schema '$ref' at ", At(path), " is not local ('", r,
           "'): only #/... is supported");
    }
    const std::string pointer = r.substr(1);
    auto it = refs_.find(pointer);
    if (it != refs_.end()) return it->second;
    const Json* target = nullptr;
    try {
      target = &root_.at(Json::json_pointer(pointer));
    } catch (const std::exception&) {
      Fail("JSON schema '$ref' at ", At(path), " ('", r, "') points to nothing");
    }
    const size_t slash = pointer.rfind('/');
    const uint32_t rule =
        b_.NewRule(RuleName(slash == std::string::npos ? "ref" : pointer.substr(slash + 1)));
    refs_[pointer] = rule;  // Before compiling: a recursive reference finds it.
    b_.Define(rule, Schema(*target, pointer));
    return rule;
  }

  std::optional<double> Bound(const Json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return std::nullopt;
    const Json& v = s[key];
    if (!v.is_number()) Fail("JSON schema '", key, "' at ", At(path), " must be a number");
    const double d = v.get<double>();
    if (!(d >= -double(kMaxIntBound) && d <= double(kMaxIntBound))) {
      Fail("JSON schema '", key, "' at ", At(path), " is beyond +-10^15");
    }
    return d;
  }

  uint32_t Count(const Json& s, const char* key, const std::string& path, uint32_t fallback) {
    if (!s.contains(key)) return fallback;
    const Json& v = s[key];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
      Fail("JSON schema '", key, "' at ", At(path), " must be a non-negative integer");
    }
    const uint64_t n = v.get<uint64_t>();
    if (n > kGrammarMaxRepeat) {
      Fail("JSON schema '", key, "' at ", At(path), " is ", n, ", over the supported ",
           kGrammarMaxRepeat);
    }
    return uint32_t(n);
  }

  E Typed(const Json& s, const std::string& type, const std::string& path) {
    if (type == "null") return Lit("null");
    if (type == "boolean") return E::Alt({Lit("true"), Lit("false")});
    if (type == "string") return String(s, path);
    if (type == "integer") return Integer(s, path);
    if (type == "number") {
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (s.contains(k)) {
          Fail("JSON schema keyword '", k, "' at ", At(path),
               " is supported only for type integer");
        }
      }
      return AnyNumber();
    }
    if (type == "object") return Object(s, path);
    if (type == "array") return Array(s, path);
    Fail("JSON schema type '", type, "' at ", At(path), " is not a JSON Schema type");
  }

  E String(const Json& s, const std::string& path) {
    const bool has_length = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      if (has_length || s.contains("pattern")) {
        Fail("JSON schema 'format' at ", At(path), " with 'pattern' or a length is not supported");
      }
      if (!s["format"].is_string()) Fail("JSON schema 'format' at ", At(path), " is not a string");
      return E::Seq({Lit("\""), Format(s["format"].get<std::string>(), path), Lit("\"")});
    }
    if (s.contains("pattern")) {
      if (has_length) {
        Fail("JSON schema 'pattern' at ", At(path), " with a length is not supported");
      }
      if (!s["pattern"].is_string()) {
        Fail("JSON schema 'pattern' at ", At(path), " is not a string");
      }
      try {
        return E::Seq(
            {Lit("\""), RegexExpr(b_, s["pattern"].get<std::string>(), true, false), Lit("\"")});
      } catch (const Error& e) {
        Fail("JSON schema 'pattern' at ", At(path), ": ", e.what());
      }
    }
    if (!has_length) return AnyString();
    const uint32_t min = Count(s, "minLength", path, 0);
    const uint32_t max = Count(s, "maxLength", path, E::kUnbounded);
    if (min > max) Fail("JSON schema at ", At(path), ": minLength > maxLength");
    return E::Seq({Lit("\""), E::Repeat(StringChar(), min, max), Lit("\"")});
  }

  E Format(const std::string& format, const std::string& path) {
    const E two_digit_hour =
        E::Alt({E::Seq({Range('0', '1'), Range('0', '9')}), E::Seq({Lit("2"), Range('0', '3')})});
    const E minute = E::Seq({Range('0', '5'), Range('0', '9')});
    const E date = E::Seq(
        {Digits(4, 4), Lit("-"),
         E::Alt({E::Seq({Lit("0"), Range('1', '9')}), E::Seq({Lit("1"), Range('0', '2')})}),
         Lit("-"),
         E::Alt({E::Seq({Lit("0"), Range('1', '9')}), E::Seq({Range('1', '2'), Range('0', '9')}),
                 E::Seq({Lit("3"), Range('0', '1')})})});
    const E time = E::Seq(
        {two_digit_hour, Lit(":"), minute, Lit(":"), minute, Opt(E::Seq({Lit("."), Digits(1, 9)})),
         E::Alt({Lit("Z"),
                 E::Seq({E::Chars({{'+', '+'}, {'-', '-'}}), two_digit_hour, Lit(":"), minute})})});
    if (format == "date") return date;
    if (format == "time") return time;
    if (format == "date-time") return E::Seq({date, Lit("T"), time});
    if (format == "uuid") {
      auto hex = [&](uint32_t n) { return E::Repeat(Hex(), n, n); };
      return E::Seq(
          {hex(8), Lit("-"), hex(4), Lit("-"), hex(4), Lit("-"), hex(4), Lit("-"), hex(12)});
    }
    Fail("JSON schema format '", format, "' at ", At(path),
         " is not supported (date, time, date-time, uuid are)");
  }

  // Digit patterns for every number in [x, y], both of the same length (digit strings).
  static void SameLength(const std::string& x, const std::string& y, std::vector<E> prefix,
                         std::vector<E>* out) {
    if (x.empty()) {
      out->push_back(E::Seq(std::move(prefix)));
      return;
    }
    const std::string xr = x.substr(1), yr = y.substr(1);
    if (x[0] == y[0]) {
      prefix.push_back(Range(x[0], x[0]));
      SameLength(xr, yr, std::move(prefix), out);
      return;
    }
    const bool low_zeros = xr.find_first_not_of('0') == std::string::npos;
    const bool high_nines = yr.find_first_not_of('9') == std::string::npos;
    if (!low_zeros) {
      std::vector<E> p = prefix;
      p.push_back(Range(x[0], x[0]));
      SameLength(xr, std::string(xr.size(), '9'), std::move(p), out);
    }
    const char a = low_zeros ? x[0] : char(x[0] + 1), b = high_nines ? y[0] : char(y[0] - 1);
    if (a <= b) {
      std::vector<E> p = prefix;
      p.push_back(Range(a, b));
      for (size_t i = 0; i < xr.size(); ++i) p.push_back(Range('0', '9'));
      out->push_back(E::Seq(std::move(p)));
    }
    if (!high_nines) {
      std::vector<E> p = prefix;
      p.push_back(Range(y[0], y[0]));
      SameLength(std::string(yr.size(), '0'), yr, std::move(p), out);
    }
  }

  // Non-negative integers in [lo, hi] (hi empty: no upper bound, up to 16 digits), no
  // leading zeros.
  static void NonNegative(int64_t lo, std::optional<int64_t> hi, std::vector<E>* out) {
    const size_t lo_digits = std::to_string(lo).size();
    const size_t hi_digits = hi ? std::to_string(*hi).size() : kMaxIntDigits;
    for (size_t d = lo_digits; d <= hi_digits; ++d) {
      int64_t first = 1;
      for (size_t i = 1; i < d; ++i) first *= 10;
      const int64_t last = first * 10 - 1;
      const int64_t a = d == lo_digits ? lo : first;
      const int64_t b = hi && d == hi_digits ? *hi : last;
      if (a > b) continue;
      if (!hi && d > lo_digits) {  // Every number of d or more digits: one pattern.
        out->push_back(E::Seq({Range('1', '9'), E::Repeat(Range('0', '9'), uint32_t(d - 1),
                                                          uint32_t(kMaxIntDigits - 1))}));
        break;
      }
      SameLength(std::to_string(a), std::to_string(b), {}, out);
    }
  }

  E Integer(const Json& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    if (auto x = Bound(s, "minimum", path)) lo = int64_t(std::ceil(*x));
    if (auto x = Bound(s, "maximum", path)) hi = int64_t(std::floor(*x));
    // exclusiveMinimum/Maximum as numbers (draft 6 and later).
    if (auto x = Bound(s, "exclusiveMinimum", path)) {
      const int64_t v = int64_t(std::floor(*x)) + 1;
      lo = lo ? std::max(*lo, v) : v;
    }
    if (auto x = Bound(s, "exclusiveMaximum", path)) {
      const int64_t v = int64_t(std::ceil(*x)) - 1;
      hi = hi ? std::min(*hi, v) : v;
    }
    if (!lo && !hi) return AnyInteger();
    if (lo && hi && *lo > *hi) Fail("JSON schema at ", At(path), ": minimum > maximum");
    std::vector<E> alternatives;
    // Negative part: -[max(1, -hi), -lo].
    if (!lo || *lo < 0) {
      const int64_t neg_lo = hi && *hi < 0 ? -*hi : 1;
      std::vector<E> negative;
      NonNegative(neg_lo, lo ? std::optional<int64_t>(-*lo) : std::nullopt, &negative);
      for (E& e : negative) alternatives.push_back(E::Seq({Lit("-"), std::move(e)}));
    }
    if (!hi || *hi >= 0) NonNegative(lo ? std::max<int64_t>(*lo, 0) : 0, hi, &alternatives);
    return E::Alt(std::move(alternatives));
  }

  E Object(const Json& s, const std::string& path) {
    std::vector<std::pair<std::string, const Json*>> properties;
    if (s.contains("properties")) {
      const Json& p = s["properties"];
      if (!p.is_object()) Fail("JSON schema 'properties' at ", At(path), " is not an object");
      for (auto it = p.begin(); it != p.end(); ++it) properties.push_back({it.key(), &it.value()});
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) Fail("JSON schema 'required' at ", At(path), " is not an array");
      for (const Json& name : r) {
        if (!name.is_string()) Fail("JSON schema 'required' at ", At(path), " holds a non-string");
        const std::string n = name.get<std::string>();
        const bool known = std::any_of(properties.begin(), properties.end(),
                                       [&](const auto& p) { return p.first == n; });
        if (!known) {
          Fail("JSON schema 'required' at ", At(path), " names '", n,
               "', which is not in 'properties'");
        }
        required.insert(n);
      }
    }
    if (options_.strict) {
      for (const auto& p : properties) required.insert(p.first);
    }
    std::optional<E> extra;  // The value of an additional property, when allowed.
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        extra = Schema(a, path + "/additionalProperties");
      }
    } else if (!options_.strict && options_.additional_properties_default) {
      extra = AnyValue();
    }

    std::optional<E> extra_member;
    if (extra) {
      extra_member = E::Ref(b_.AddRule("member", E::Seq({AnyString(), Colon(), *extra})));
    }
    const size_t n = properties.size();
    std::vector<E> members;
    for (const auto& [name, schema] : properties) {
      const uint32_t value = b_.AddRule(
          RuleName(name), Schema(*schema, path + "/properties/" + JsonPointerToken(name)));
      members.push_back(E::Seq({Lit(Json(name).dump()), Colon(), E::Ref(value)}));
    }
    // rest[i]: the properties from i on, after at least one member (each after a comma);
    // first[i]: the same when no member was written yet, non-empty. Properties keep their
    // schema order; additional ones come last.
    E rest = E::Empty();
    std::optional<E> first;
    if (extra_member) {
      const uint32_t r = b_.NewRule("more");
      b_.Define(r, E::Alt({E::Empty(), E::Seq({Comma(), *extra_member, E::Ref(r)})}));
      rest = E::Ref(r);
      first = E::Seq({*extra_member, rest});
    }
    for (size_t i = n; i-- > 0;) {
      const bool req = required.count(properties[i].first) > 0;
      const E take = E::Seq({Comma(), members[i], rest});
      const E take_first = E::Seq({members[i], rest});
      E new_rest = req ? take : E::Alt({take, rest});
      std::optional<E> new_first;
      if (req || !first) {
        new_first = take_first;
      } else {
        new_first = E::Alt({take_first, *first});
      }
      rest = E::Ref(b_.AddRule("props", new_rest));
      first = E::Ref(b_.AddRule("props", *new_first));
    }
    std::vector<E> forms;
    if (required.empty()) forms.push_back(E::Seq({Lit("{"), Ws(), Lit("}")}));
    if (first) forms.push_back(E::Seq({Lit("{"), Ws(), *first, Ws(), Lit("}")}));
    return E::Ref(b_.AddRule("object", E::Alt(std::move(forms))));
  }

  E Array(const Json& s, const std::string& path) {
    std::vector<E> prefix;
    if (s.contains("prefixItems")) {
      const Json& p = s["prefixItems"];
      if (!p.is_array()) Fail("JSON schema 'prefixItems' at ", At(path), " is not an array");
      for (size_t i = 0; i < p.size(); ++i) {
        prefix.push_back(
            E::Ref(b_.AddRule("item", Schema(p[i], path + "/prefixItems/" + std::to_string(i)))));
      }
    }
    std::optional<E> rest = AnyValue();
    if (s.contains("items")) {
      const Json& it = s["items"];
      if (it.is_array()) {
        Fail("JSON schema 'items' at ", At(path),
             " as an array is not supported (use prefixItems)");
      }
      if (it.is_boolean() && !it.get<bool>()) {
        rest.reset();
      } else {
        rest = E::Ref(b_.AddRule("item", Schema(it, path + "/items")));
      }
    }
    const uint32_t k = uint32_t(prefix.size());
    const uint32_t min = Count(s, "minItems", path, 0);
    uint32_t max = Count(s, "maxItems", path, E::kUnbounded);
    if (!rest) max = std::min(max, k);
    if (min > max) Fail("JSON schema at ", At(path), ": minItems is more than the items allowed");
    auto elem = [&](uint32_t j) { return j < k ? prefix[j] : *rest; };
    // after(j): what follows j elements.
    std::function<E(uint32_t)> after = [&](uint32_t j) -> E {
      if (j >= max) return E::Empty();
      if (j >= k) {
        return E::Repeat(E::Seq({Comma(), *rest}), min > j ? min - j : 0,
                         max == E::kUnbounded ? E::kUnbounded : max - j);
      }
      const E next = E::Seq({Comma(), elem(j), after(j + 1)});
      return j >= min ? E::Alt({E::Empty(), next}) : next;
    };
    std::vector<E> forms;
    if (min == 0) forms.push_back(E::Seq({Lit("["), Ws(), Lit("]")}));
    if (max >= 1) forms.push_back(E::Seq({Lit("["), Ws(), elem(0), after(1), Ws(), Lit("]")}));
    return E::Ref(b_.AddRule("array", E::Alt(std::move(forms))));
  }

  const Json& root_;
  JsonSchemaOptions options_;
  GrammarBuilder& b_;
  std::map<std::string, uint32_t> refs_;
  int depth_ = 0;
  std::optional<uint32_t> ws_, string_char_, any_string_, any_integer_, any_number_, any_object_,
      any_array_, any_value_;
};

}  // namespace

Grammar JsonSchemaGrammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options) {
  GrammarBuilder builder;
  return SchemaCompiler(builder, schema, options).Build();
}

GrammarExpr JsonSchemaExpr(GrammarBuilder& builder, const nlohmann::ordered_json& schema,
                           const JsonSchemaOptions& options, const std::string& pointer) {
  return SchemaCompiler(builder, schema, options).Value(pointer);
}

Grammar JsonSchemaGrammar(const nlohmann::json& schema, const JsonSchemaOptions& options) {
  return JsonSchemaGrammar(nlohmann::ordered_json::parse(schema.dump()), options);
}

Grammar JsonObjectGrammar(const JsonSchemaOptions& options) {
  const Json empty = Json::object();
  GrammarBuilder builder;
  return SchemaCompiler(builder, empty, options).BuildAnyObject();
}

std::string JsonPointerToken(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace moex

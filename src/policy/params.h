// A policy's parameters, declared once. Each options struct lists its parameters in one
// member template, VisitParams: name, the member (its initializer is the typed default),
// range or choices, and a one-line doc:
//
//   enum class Evict { kLcp, kLru };
//   struct MyOptions {
//     double theta = 0.5;
//     Evict evict = Evict::kLcp;
//     template <class V> void VisitParams(V& v) {
//       v.Real("theta", theta, 0, 1, "split ratio");
//       v.Choice("evict", evict, {{Evict::kLcp, "lcp"}, {Evict::kLru, "lru"}}, "priority");
//     }
//   };
//
// Everything else derives from it: ParamSpecsOf<MyOptions>() gives the registry its specs
// (`moex policies`, the checks of a spec's values, defaults), Params::As<MyOptions>() the
// typed struct of a resolved spec, ParamText and NonDefault the text of its values.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace moex::policy {

enum class ParamType { kInt, kReal, kBool, kString };

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kReal;
  std::string default_value;
  double min = -std::numeric_limits<double>::infinity();  // kInt and kReal, inclusive.
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices{};  // kString: the valid values (empty = any).
  std::string doc{};
};

// One value of a choice parameter and its name in a spec.
template <class E>
struct ParamChoice {
  E value;
  const char* name;
};

const char* ParamTypeName(ParamType t);  // "int", "real", "bool", "string".

// The canonical text of a value: integers in full, reals to 17 significant digits (exact),
// bools as 1 or 0.
std::string IntText(int64_t v);
std::string RealText(double v);

// A part's parameters, checked against its ParamSpecs and completed with defaults; the
// values are held in canonical text form.
class Params {
 public:
  Params() = default;
  Params(const std::vector<ParamSpec>* specs, std::map<std::string, std::string> values)
      : specs_(specs), values_(std::move(values)) {}
  int64_t Int(const std::string& name) const;
  double Real(const std::string& name) const;
  bool Bool(const std::string& name) const;
  const std::string& String(const std::string& name) const;
  // "key=value,..." of the values that differ from their defaults, in declaration order.
  std::string NonDefault() const;

  // The typed options struct (see the top of this file) these values set.
  template <class O>
  O As() const;

 private:
  const std::string& Raw(const std::string& name) const;
  const std::vector<ParamSpec>* specs_ = nullptr;
  std::map<std::string, std::string> values_;  // Every declared parameter.
};
// A part's `key=value`s checked against `specs` and completed with their defaults.
// `policy` names the policy in errors: an unknown key lists the valid ones, a bad value
// says what is valid (a number in range, a bool, one of the choices).
Params CheckParams(const std::string& policy, const std::vector<ParamSpec>* specs,
                   const std::vector<std::pair<std::string, std::string>>& values);

// Checks a declared default (registration) and returns it in canonical form; throws as
// CheckParams does.
std::string CheckParamValue(const std::string& policy, const ParamSpec& spec,
                            const std::string& value);

namespace params_detail {

// Collects the ParamSpecs, defaults from the fields' values.
class SpecWriter {
 public:
  std::vector<ParamSpec> specs;
  template <class T>
  void Int(const char* name, T& field, double min, double max, const char* doc) {
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
    specs.push_back(
        {name, ParamType::kInt, IntText(static_cast<int64_t>(field)), min, max, {}, doc});
  }
  void Real(const char* name, double& field, double min, double max, const char* doc) {
    specs.push_back({name, ParamType::kReal, RealText(field), min, max, {}, doc});
  }
  void Bool(const char* name, bool& field, const char* doc) {
    specs.push_back(
        {.name = name, .type = ParamType::kBool, .default_value = field ? "1" : "0", .doc = doc});
  }
  template <class E>
  void Choice(const char* name, E& field,
              std::initializer_list<ParamChoice<std::type_identity_t<E>>> choices,
              const char* doc) {
    ParamSpec s{.name = name, .type = ParamType::kString, .default_value = "", .doc = doc};
    for (const auto& c : choices) {
      s.choices.push_back(c.name);
      if (c.value == field) s.default_value = c.name;
    }
    specs.push_back(std::move(s));
  }
};

// Sets the fields from checked Params.
class Reader {
 public:
  explicit Reader(const Params& p) : p_(p) {}
  template <class T>
  void Int(const char* name, T& field, double, double, const char*) {
    field = static_cast<T>(p_.Int(name));
  }
  void Real(const char* name, double& field, double, double, const char*) { field = p_.Real(name); }
  void Bool(const char* name, bool& field, const char*) { field = p_.Bool(name); }
  template <class E>
  void Choice(const char* name, E& field,
              std::initializer_list<ParamChoice<std::type_identity_t<E>>> choices, const char*) {
    const std::string& text = p_.String(name);
    for (const auto& c : choices)
      if (text == c.name) {
        field = c.value;
        return;
      }
    Unknown(name, text);
  }

 private:
  [[noreturn]] static void Unknown(const char* name, const std::string& value);
  const Params& p_;
};

// The canonical text of each field, in declaration order.
class TextWriter {
 public:
  std::vector<std::pair<std::string, std::string>> values;
  template <class T>
  void Int(const char* name, T& field, double, double, const char*) {
    values.emplace_back(name, IntText(static_cast<int64_t>(field)));
  }
  void Real(const char* name, double& field, double, double, const char*) {
    values.emplace_back(name, RealText(field == 0 ? 0.0 : field));  // -0 is 0.
  }
  void Bool(const char* name, bool& field, const char*) {
    values.emplace_back(name, field ? "1" : "0");
  }
  template <class E>
  void Choice(const char* name, E& field,
              std::initializer_list<ParamChoice<std::type_identity_t<E>>> choices, const char*) {
    for (const auto& c : choices)
      if (c.value == field) values.emplace_back(name, c.name);
  }
};

}  // namespace params_detail

template <class O>
std::vector<ParamSpec> ParamSpecsOf() {
  O defaults{};
  params_detail::SpecWriter w;
  defaults.VisitParams(w);
  return std::move(w.specs);
}

template <class O>
O Params::As() const {
  O o{};
  params_detail::Reader r(*this);
  o.VisitParams(r);
  return o;
}

// name -> canonical text of every parameter of `o`, in declaration order.
template <class O>
std::vector<std::pair<std::string, std::string>> ParamValues(O o) {
  params_detail::TextWriter w;
  o.VisitParams(w);
  return std::move(w.values);
}

// The canonical text of one parameter of `o` ("" when it has none of that name).
template <class O>
std::string ParamText(const O& o, const std::string& name) {
  for (auto& [key, value] : ParamValues(o))
    if (key == name) return value;
  return "";
}

// "key=value,..." of the parameters of `o` that differ from the defaults, in declaration
// order (the same text as Params::NonDefault of the values that set `o`).
template <class O>
std::string NonDefault(const O& o) {
  const auto defaults = ParamValues(O{});
  const auto values = ParamValues(o);
  std::string text;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].second != defaults[i].second)
      text += (text.empty() ? "" : ",") + values[i].first + "=" + values[i].second;
  return text;
}

// `worker_gflops`: the CPU rate the simulator charges for a learned predictor's inference
// on the policy worker (the policies that run one hold this and visit it).
struct WorkerGflops {
  static constexpr const char* kName = "worker_gflops";
  double gflops = 20;
  template <class V>
  void VisitParams(V& v) {
    v.Real(kName, gflops, 0.001, 1e6,
           "simulator only: CPU rate charged for predictor inference on the policy worker");
  }
};

}  // namespace moex::policy

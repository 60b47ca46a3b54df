// Values of the Jinja subset that renders chat templates: Python-like (None, bool, int, float,
// str, list, dict) plus undefined, callables and namespaces. Lists and dicts are shared by
// reference, as in Python; namespace() is a dict whose attributes can be assigned.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace moex::jinja {

// The most text one render may build (its output, any string, a list or dict turned into
// text): a checkpoint's template is untrusted code, so a render ends in bounded memory (a real
// template over a long conversation writes a few hundred KB). Beyond it: Error.
constexpr size_t kMaxTemplateText = size_t{32} << 20;
void CheckTextSize(size_t bytes);

class Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order, like Python
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(std::vector<Value>& args, Kwargs& kwargs)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value List(ValueList items = {});
  static Value Dict(ValueDict items = {}, bool is_namespace = false);
  static Value Func(Function f);
  static Value FromJson(const nlohmann::json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kDict && namespace_; }

  bool b() const { return b_; }
  int64_t i() const { return i_; }
  double f() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : f_; }
  const std::string& s() const { return s_; }
  ValueList& list() const { return *list_; }
  ValueDict& dict() const { return *dict_; }
  const Function& func() const { return *func_; }

  // Python truthiness.
  bool Truthy() const;
  // Dict lookup; undefined when absent.
  Value Get(const std::string& key) const;
  void Set(const std::string& key, Value v) const;
  // str(value) as Jinja prints it ({{ x }}): None, True, 1.0, ['a'].
  std::string Str() const;
  // json.dumps(value) with Python's default separators, ensure_ascii off.
  std::string ToJson(int indent = -1) const;
  nlohmann::json Json() const;
  const char* TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool namespace_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<Function> func_;
};

bool Equal(const Value& a, const Value& b);

}  // namespace moex::jinja

#include "text/chat_template_value.h"

#include "core/error.h"

#include <cmath>
#include <cstdio>

namespace moex::jinja {

void CheckTextSize(size_t bytes) {
  Check(bytes <= kMaxTemplateText, "chat template: text of more than ", kMaxTemplateText >> 20,
        " MiB (a string that keeps growing?)");
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = d;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}
Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::Dict(ValueDict items, bool is_namespace) {
  Value v;
  v.kind_ = Kind::kDict;
  v.namespace_ = is_namespace;
  v.dict_ = std::make_shared<ValueDict>(std::move(items));
  return v;
}
Value Value::Func(Function f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.func_ = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::FromJson(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return None();
    case nlohmann::json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      // Past int64 it is a float, as Python's int would not be but Jinja's math would go.
      if (j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return Float(static_cast<double>(j.get<uint64_t>()));
      return Int(j.get<int64_t>());
    case nlohmann::json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      ValueDict items;
      for (const auto& [k, e] : j.items()) items.emplace_back(k, FromJson(e));
      return Dict(std::move(items));
    }
    default:
      return Value();
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return namespace_ || !dict_->empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

Value Value::Get(const std::string& key) const {
  if (kind_ != Kind::kDict) return Value();
  for (const auto& [k, v] : *dict_) {
    if (k == key) return v;
  }
  return Value();
}

void Value::Set(const std::string& key, Value v) const {
  for (auto& [k, old] : *dict_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict_->emplace_back(key, std::move(v));
}

namespace {

std::string FloatStr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Python repr: shortest round-trip digits, always with a decimal point or exponent.
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".einn") == std::string::npos) s += ".0";
  return s;
}

std::string PyRepr(const Value& v);

std::string PyReprString(const std::string& s) {
  const char quote =
      s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out + quote;
}

std::string PyRepr(const Value& v) {
  if (v.is_string()) return PyReprString(v.s());
  return v.Str();
}

}  // namespace

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return FloatStr(f_);
    case Kind::kString:
      return s_;
    case Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < list_->size(); ++k) {
        out += (k ? ", " : "") + PyRepr((*list_)[k]);
        CheckTextSize(out.size());
      }
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t k = 0; k < dict_->size(); ++k) {
        out +=
            (k ? ", " : "") + PyReprString((*dict_)[k].first) + ": " + PyRepr((*dict_)[k].second);
        CheckTextSize(out.size());
      }
      return out + "}";
    }
    case Kind::kFunction:
      return "<function>";
  }
  return "";
}

nlohmann::json Value::Json() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
    case Kind::kFunction:
      return nullptr;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_;
    case Kind::kFloat:
      return f_;
    case Kind::kString:
      return s_;
    case Kind::kList: {
      nlohmann::json a = nlohmann::json::array();
      for (const Value& v : *list_) a.push_back(v.Json());
      return a;
    }
    case Kind::kDict: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& [k, v] : *dict_) o[k] = v.Json();
      return o;
    }
  }
  return nullptr;
}

namespace {

void JsonString(const std::string& s, std::string* out) {
  // ensure_ascii=False: only quotes, backslashes and control characters are escaped.
  *out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += c;
        }
    }
  }
  *out += '"';
}

void ToJsonImpl(const Value& v, int indent, int depth, std::string* out) {
  const std::string nl = indent >= 0 ? "\n" + std::string((depth + 1) * indent, ' ') : "";
  const std::string close = indent >= 0 ? "\n" + std::string(depth * indent, ' ') : "";
  const std::string item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::kString:
      JsonString(v.s(), out);
      return;
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return;
      }
      *out += "[" + nl;
      for (size_t k = 0; k < v.list().size(); ++k) {
        if (k) *out += item_sep + nl;
        ToJsonImpl(v.list()[k], indent, depth + 1, out);
        CheckTextSize(out->size());
      }
      *out += close + "]";
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict().empty()) {
        *out += "{}";
        return;
      }
      *out += "{" + nl;
      for (size_t k = 0; k < v.dict().size(); ++k) {
        if (k) *out += item_sep + nl;
        JsonString(v.dict()[k].first, out);
        *out += ": ";
        ToJsonImpl(v.dict()[k].second, indent, depth + 1, out);
        CheckTextSize(out->size());
      }
      *out += close + "}";
      return;
    }
    case Value::Kind::kBool:
      *out += v.b() ? "true" : "false";
      return;
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
      *out += v.Str();
      return;
    default:
      *out += "null";
  }
}

}  // namespace

std::string Value::ToJson(int indent) const {
  std::string out;
  ToJsonImpl(*this, indent, 0, &out);
  return out;
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "none";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.f() == b.f();
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kBool:
      return a.b() == b.b();
    case Value::Kind::kString:
      return a.s() == b.s();
    case Value::Kind::kList:
      if (a.list().size() != b.list().size()) return false;
      for (size_t k = 0; k < a.list().size(); ++k) {
        if (!Equal(a.list()[k], b.list()[k])) return false;
      }
      return true;
    case Value::Kind::kDict:
      return a.Json() == b.Json();
    default:
      return false;
  }
}

}  // namespace moex::jinja

#include "policy/params.h"

#include <cmath>
#include <exception>
#include <sstream>

#include "core/error.h"

namespace moex::policy {

namespace {

std::string ValidParams(const std::vector<ParamSpec>& specs) {
  if (specs.empty()) return "it takes no parameters";
  std::string valid;
  for (const ParamSpec& p : specs)
    valid += (valid.empty() ? "" : ", ") + p.name + " (" + ParamTypeName(p.type) + ")";
  return "valid: " + valid;
}

}  // namespace

const char* ParamTypeName(ParamType t) {
  switch (t) {
    case ParamType::kInt:
      return "int";
    case ParamType::kReal:
      return "real";
    case ParamType::kBool:
      return "bool";
    case ParamType::kString:
      return "string";
  }
  return "?";
}

std::string IntText(int64_t v) {
  return std::to_string(v);
}

std::string RealText(double v) {
  std::ostringstream text;
  text.precision(17);
  text << v;
  return text.str();
}

std::string CheckParamValue(const std::string& policy, const ParamSpec& p,
                            const std::string& value) {
  const std::string where = "policy " + policy + ": parameter " + p.name + "='" + value + "'";
  switch (p.type) {
    case ParamType::kBool:
      if (value == "1" || value == "true" || value == "on") return "1";
      if (value == "0" || value == "false" || value == "off") return "0";
      Fail(where, " is not a bool (true/false, 1/0, on/off)");
    case ParamType::kString:
      if (!p.choices.empty()) {
        std::string valid;
        for (const std::string& c : p.choices) {
          if (c == value) return value;
          valid += (valid.empty() ? "" : ", ") + c;
        }
        Fail(where, " is not one of: ", valid);
      }
      return value;
    case ParamType::kInt:
    case ParamType::kReal: {
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      Check(used == value.size() && std::isfinite(v), where, " is not a number");
      if (p.type == ParamType::kInt)
        Check(v == std::floor(v) && std::fabs(v) < 9e15, where, " is not an integer");
      Check(v >= p.min && v <= p.max, where, " is out of range [", p.min, ", ", p.max, "]");
      if (p.type == ParamType::kInt) return IntText(static_cast<int64_t>(v));
      return RealText(v);
    }
  }
  return value;
}

Params CheckParams(const std::string& policy, const std::vector<ParamSpec>* specs,
                   const std::vector<std::pair<std::string, std::string>>& values) {
  std::map<std::string, std::string> checked;
  for (const ParamSpec& p : *specs) checked[p.name] = CheckParamValue(policy, p, p.default_value);
  for (const auto& [key, value] : values) {
    const ParamSpec* found = nullptr;
    for (const ParamSpec& p : *specs)
      if (p.name == key) found = &p;
    Check(found != nullptr, "policy ", policy, " has no parameter '", key, "' (",
          ValidParams(*specs), ")");
    checked[key] = CheckParamValue(policy, *found, value);
  }
  return Params(specs, std::move(checked));
}

const std::string& Params::Raw(const std::string& name) const {
  auto it = values_.find(name);
  Check(it != values_.end(), "policy parameter '", name, "' is not declared");
  return it->second;
}

int64_t Params::Int(const std::string& name) const {
  return std::stoll(Raw(name));
}
double Params::Real(const std::string& name) const {
  return std::stod(Raw(name));
}
bool Params::Bool(const std::string& name) const {
  return Raw(name) == "1";
}
const std::string& Params::String(const std::string& name) const {
  return Raw(name);
}

std::string Params::NonDefault() const {
  std::string text;
  if (specs_ == nullptr) return text;
  for (const ParamSpec& p : *specs_) {
    const std::string& v = Raw(p.name);
    // Compare canonical forms: "0.50" and "0.5" are the same setting.
    bool same = v == p.default_value;
    if (!same && p.type == ParamType::kBool)  // "true" and "1" are the same setting.
      same = v == (p.default_value == "1" || p.default_value == "true" || p.default_value == "on"
                       ? "1"
                       : "0");
    if (!same && (p.type == ParamType::kReal || p.type == ParamType::kInt))
      same = std::stod(v) == std::stod(p.default_value);
    if (!same) text += (text.empty() ? "" : ",") + p.name + "=" + v;
  }
  return text;
}

void params_detail::Reader::Unknown(const char* name, const std::string& value) {
  Fail("policy parameter ", name, "='", value, "' is none of the declared choices");
}

}  // namespace moex::policy

#include "policy/registry.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "policy/composed_policy.h"

namespace moex::policy {

namespace {

// Stable storage: Params keep pointers to their PolicyInfo's ParamSpecs.
std::deque<PolicyInfo>& Registry() {
  static std::deque<PolicyInfo> registry;
  return registry;
}

const char* TypeName(ParamType t) {
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

std::string RolesText(unsigned roles) {
  std::string text;
  for (auto [bit, name] : {std::pair{kPrefetches, "prefetch"}, std::pair{kEvicts, "evict"},
                           std::pair{kRegroups, "regroup"}})
    if (roles & bit) text += (text.empty() ? "" : "+") + std::string(name);
  return text;
}

std::string ValidNames() {
  std::string valid;
  for (const PolicyInfo* p : RegisteredPolicies()) valid += (valid.empty() ? "" : ", ") + p->name;
  return valid;
}

std::string ValidParams(const PolicyInfo& info) {
  if (info.params.empty()) return "it takes no parameters";
  std::string valid;
  for (const ParamSpec& p : info.params)
    valid += (valid.empty() ? "" : ", ") + p.name + " (" + TypeName(p.type) + ")";
  return "valid: " + valid;
}

// Checks one value against its spec and returns it in canonical text form.
std::string CheckValue(const PolicyInfo& info, const ParamSpec& p, const std::string& value) {
  const std::string where = "policy " + info.name + ": parameter " + p.name + "='" + value + "'";
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
      if (p.type == ParamType::kInt) return std::to_string(static_cast<int64_t>(v));
      std::ostringstream text;
      text.precision(17);
      text << v;
      return text.str();
    }
  }
  return value;
}

}  // namespace

bool RegisterPolicy(PolicyInfo info) {
  Check(!info.name.empty() && info.make != nullptr && info.roles != 0,
        "policy registration needs a name, roles and a factory");
  for (const PolicyInfo& p : Registry()) {
    Check(p.name != info.name, "policy '", info.name, "' registered twice");
    for (const std::string& a : info.aliases) Check(p.name != a, "policy alias '", a, "' taken");
  }
  for (const ParamSpec& p : info.params) CheckValue(info, p, p.default_value);
  Registry().push_back(std::move(info));
  return true;
}

std::vector<const PolicyInfo*> RegisteredPolicies() {
  std::vector<const PolicyInfo*> list;
  for (const PolicyInfo& p : Registry()) list.push_back(&p);
  std::sort(list.begin(), list.end(),
            [](const PolicyInfo* a, const PolicyInfo* b) { return a->name < b->name; });
  return list;
}

const PolicyInfo* FindPolicy(const std::string& name) {
  for (const PolicyInfo& p : Registry()) {
    if (p.name == name) return &p;
    for (const std::string& a : p.aliases)
      if (a == name) return &p;
  }
  return nullptr;
}

const std::string& Params::Raw(const std::string& name) const {
  auto it = values_.find(name);
  Check(it != values_.end(), "policy parameter '", name, "' is not declared");
  return it->second;
}
ParamSpec WorkerGflopsParam() {
  return {"worker_gflops", ParamType::kReal, "20", 0.001, 1e6, {},
          "simulator only: CPU rate charged for predictor inference on the policy worker"};
}

int64_t Params::Int(const std::string& name) const { return std::stoll(Raw(name)); }
double Params::Real(const std::string& name) const { return std::stod(Raw(name)); }
bool Params::Bool(const std::string& name) const { return Raw(name) == "1"; }
const std::string& Params::String(const std::string& name) const { return Raw(name); }

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

std::vector<ResolvedPart> ResolvePolicySpec(const std::string& text) {
  const PolicySpec spec = ParsePolicySpec(text);
  std::vector<ResolvedPart> parts;
  for (const PolicyPartSpec& part : spec.parts) {
    const PolicyInfo* info = FindPolicy(part.name);
    Check(info != nullptr, "unknown policy '", part.name, "' in '", text, "' (valid: ",
          ValidNames(), "; `moex policies` lists them with their parameters)");
    std::map<std::string, std::string> values;
    for (const ParamSpec& p : info->params) values[p.name] = CheckValue(*info, p, p.default_value);
    for (const auto& [key, value] : part.params) {
      const ParamSpec* found = nullptr;
      for (const ParamSpec& p : info->params)
        if (p.name == key) found = &p;
      Check(found != nullptr, "policy ", info->name, " has no parameter '", key, "' (",
            ValidParams(*info), ")");
      values[key] = CheckValue(*info, *found, value);
    }
    parts.push_back({info, Params(&info->params, std::move(values))});
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i)
    Check(parts[i].info->roles & (kPrefetches | kRegroups), "policy spec '", text,
          "': ", parts[i].info->name,
          " only evicts, so it must be the last part (a spec is prefetchers then one evictor, "
          "e.g. nextgate+lfu)");
  return parts;
}

bool SpecNeedsFuture(const std::string& spec) {
  for (const ResolvedPart& p : ResolvePolicySpec(spec))
    if (p.info->needs_future) return true;
  return false;
}

unsigned SpecTraceNeeds(const std::string& spec) {
  unsigned needs = 0;
  for (const ResolvedPart& p : ResolvePolicySpec(spec)) needs |= p.info->trace_needs;
  return needs;
}

std::unique_ptr<Policy> MakePolicy(const std::string& spec, const PolicyFacts& facts) {
  std::vector<ResolvedPart> resolved = ResolvePolicySpec(spec);
  if (!(resolved.back().info->roles & kEvicts)) resolved.push_back(ResolvePolicySpec("lru")[0]);
  std::vector<ComposedPolicy::Part> parts;
  for (const ResolvedPart& r : resolved) {
    for (const ResolvedPart& other : resolved)
      Check(&other == &r || other.info != r.info, "policy spec '", spec, "' names ", r.info->name,
            " twice");
    std::string name = r.info->name;
    if (const std::string p = r.params.NonDefault(); !p.empty()) name += ":" + p;
    parts.push_back({name, r.info->make(facts, r.params)});
  }
  return std::make_unique<ComposedPolicy>(std::move(parts));
}

nlohmann::json PoliciesJson() {
  nlohmann::json list = nlohmann::json::array();
  for (const PolicyInfo* p : RegisteredPolicies()) {
    nlohmann::json params = nlohmann::json::array();
    for (const ParamSpec& s : p->params) {
      nlohmann::json j = {{"name", s.name},
                          {"type", TypeName(s.type)},
                          {"default", s.default_value},
                          {"doc", s.doc}};
      if (std::isfinite(s.min)) j["min"] = s.min;
      if (std::isfinite(s.max)) j["max"] = s.max;
      if (!s.choices.empty()) j["choices"] = s.choices;
      params.push_back(j);
    }
    list.push_back({{"name", p->name},
                    {"roles", RolesText(p->roles)},
                    {"doc", p->doc},
                    {"source", p->source},
                    {"simulator_only", p->needs_future},
                    {"aliases", p->aliases},
                    {"params", params}});
  }
  return list;
}

std::string PoliciesText() {
  std::ostringstream out;
  out << "Policies (compose as prefetcher+evictor, parameters as name:key=value,...):\n";
  for (const PolicyInfo* p : RegisteredPolicies()) {
    out << "\n  " << p->name << "  [" << RolesText(p->roles)
        << (p->needs_future ? ", simulator only" : "") << "]";
    if (!p->aliases.empty()) {
      out << "  (also:";
      for (const std::string& a : p->aliases) out << " " << a;
      out << ")";
    }
    out << "\n      " << p->doc << "\n      source: " << p->source << "\n";
    for (const ParamSpec& s : p->params) {
      out << "      " << s.name << " (" << TypeName(s.type) << ", default " << s.default_value;
      if (std::isfinite(s.min) || std::isfinite(s.max))
        out << ", range [" << s.min << ", " << s.max << "]";
      if (!s.choices.empty()) {
        out << ", one of";
        for (const std::string& c : s.choices) out << " " << c;
      }
      out << "): " << s.doc << "\n";
    }
  }
  return out.str();
}

}  // namespace moex::policy

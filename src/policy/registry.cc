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

}  // namespace

bool RegisterPolicy(PolicyInfo info) {
  Check(!info.name.empty() && info.make != nullptr && info.roles != 0,
        "policy registration needs a name, roles and a factory");
  for (const PolicyInfo& p : Registry()) {
    Check(p.name != info.name, "policy '", info.name, "' registered twice");
    for (const std::string& a : info.aliases) Check(p.name != a, "policy alias '", a, "' taken");
  }
  for (const ParamSpec& p : info.params) CheckParamValue(info.name, p, p.default_value);
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

std::vector<ResolvedPart> ResolvePolicySpec(const std::string& text) {
  const PolicySpec spec = ParsePolicySpec(text);
  std::vector<ResolvedPart> parts;
  for (const PolicyPartSpec& part : spec.parts) {
    const PolicyInfo* info = FindPolicy(part.name);
    Check(info != nullptr, "unknown policy '", part.name, "' in '", text, "' (valid: ",
          ValidNames(), "; `moex policies` lists them with their parameters)");
    parts.push_back({info, CheckParams(info->name, &info->params, part.params)});
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

unsigned SpecTraceReads(const std::string& spec) {
  unsigned reads = 0;
  for (const ResolvedPart& p : ResolvePolicySpec(spec))
    reads |= p.info->trace_needs | p.info->trace_uses;
  return reads;
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
                          {"type", ParamTypeName(s.type)},
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
      out << "      " << s.name << " (" << ParamTypeName(s.type) << ", default " << s.default_value;
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

// The one registry of policies. Each policy registers, in its own file under src/policy/,
// its name, its role (prefetch, evict or both), its parameters (declared once in an options
// struct, params.h) and a factory; nothing else is edited to add one:
//
//   MOEX_REGISTER_POLICY({.name = "lru", .roles = kEvicts, .doc = "...", .make = ...});
//   MOEX_REGISTER_POLICY({..., .params = ParamSpecsOf<MyOptions>(),
//                         .make = [](const PolicyFacts& f, const Params& p) {
//                           return std::make_unique<MyPolicy>(f, p.As<MyOptions>()); }});
//
// MakePolicy turns a spec (policy_spec.h) into a Policy: every part of the spec is built by
// its factory with its parameters checked and defaulted, and the parts are composed
// (ComposedPolicy): all see every event; the last part evicts (an LRU evictor is appended
// when no part evicts); every part before it must prefetch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "policy/params.h"
#include "policy/policy.h"
#include "policy/policy_spec.h"

namespace moex::policy {

// kRegroups: answers Policy::RegroupPasses (the server's token regrouping).
enum PolicyRole : unsigned { kPrefetches = 1, kEvicts = 2, kRegroups = 4 };

// What a policy needs from a trace in the simulator (the engine always has all of it).
enum TraceNeed : unsigned {
  kNeedsRouterWeights = 1,
  kNeedsHidden = 2,
  kNeedsProbs = 4,
  kNeedsPooled = 8,
};

struct PolicyInfo {
  std::string name;
  unsigned roles = 0;  // PolicyRole bits.
  std::string doc;     // One line.
  std::string source;  // Where the technique comes from (a paper and section), or "baseline".
  std::vector<ParamSpec> params{};
  bool needs_future = false;  // Only the simulator can run it (belady, oracle).
  // Evicts by recency alone (lru): with fewer slots than one pass's experts it evicts each
  // one before the next token needs it again (the engine warns of such budgets).
  bool recency_eviction = false;
  unsigned trace_needs = 0;   // TraceNeed bits.
  // TraceNeed bits it reads when an event carries them and does without otherwise (a feature
  // that turns off): what an event relay must forward for it to decide as in one process.
  unsigned trace_uses = 0;
  // Specs the conformance tests run besides the defaults (e.g. "moepic:theta=0.25").
  std::vector<std::string> test_specs{};
  std::vector<std::string> aliases{};  // Other names for the same policy ("ondemand").
  std::function<std::unique_ptr<Policy>(const PolicyFacts&, const Params&)> make{};
};

bool RegisterPolicy(PolicyInfo info);
#define MOEX_POLICY_CONCAT_(a, b) a##b
#define MOEX_POLICY_CONCAT(a, b) MOEX_POLICY_CONCAT_(a, b)
#define MOEX_REGISTER_POLICY(...)                                          \
  [[maybe_unused]] static const bool MOEX_POLICY_CONCAT(kRegistered, __LINE__) = \
      ::moex::policy::RegisterPolicy(__VA_ARGS__)

// Every registered policy, by name.
std::vector<const PolicyInfo*> RegisteredPolicies();
// By name or alias; null when unknown.
const PolicyInfo* FindPolicy(const std::string& name);

// The registered parts of a spec (checked: names exist, parameters valid); throws Error
// listing what is valid.
struct ResolvedPart {
  const PolicyInfo* info = nullptr;
  Params params;
};
std::vector<ResolvedPart> ResolvePolicySpec(const std::string& spec);
bool SpecNeedsFuture(const std::string& spec);
unsigned SpecTraceNeeds(const std::string& spec);
// SpecTraceNeeds plus every part's trace_uses: what the spec reads when it is there.
unsigned SpecTraceReads(const std::string& spec);

std::unique_ptr<Policy> MakePolicy(const std::string& spec, const PolicyFacts& facts);

// `moex policies`: every policy, its role, parameters and defaults.
nlohmann::json PoliciesJson();
std::string PoliciesText();

}  // namespace moex::policy

// How every command builds its policy from the command line: the spec (--policy), what it
// learns from past traces first (--learn-from), and the state it loads and saves
// (--policy-state). Shared by generate, bench, trace record and sim (and serve).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "policy/policy.h"
#include "policy/policy_worker.h"
#include "tiers/policy_assembly.h"

namespace moex::cli {

struct PolicySetup {
  std::string spec = "lru";
  std::vector<std::string> learn_from;  // Trace paths.
  std::string state_path;               // Loaded when it exists; saved at the end.
};

// Registers --learn-from and --policy-state (the caller registers --policy, whose doc
// differs between commands).
void AddPolicyLearningOptions(CLI::App& cmd, PolicySetup& setup);
// Registers --policy-worker, storing the mode's name in `mode`.
void AddPolicyWorkerOption(CLI::App& cmd, std::string& mode, const std::string& default_mode);

// Builds `setup.spec` from a driver's facts, loads the saved state when the file exists,
// then learns from the traces. What was loaded and learned is kept per spec, so a sweep
// over budgets learns once.
tiers::PolicyMaker MakePolicyMaker(const PolicySetup& setup);

// Writes the policy's state to setup.state_path (atomically) when it is set.
void SavePolicyState(const PolicySetup& setup, const policy::Policy& policy,
                     const policy::PolicyFacts& facts);

}  // namespace moex::cli

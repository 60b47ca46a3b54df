#include "cli/policy_setup.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>

#include "core/error.h"
#include "core/logging.h"
#include "io/input_file.h"
#include "io/output_file.h"
#include "policy/policy_state.h"
#include "policy/registry.h"
#include "trace/policy_learning.h"

namespace moex::cli {

namespace {

std::string ReadWholeFile(const std::string& path) {
  try {
    return ReadInputFile(path, kMaxDataFileBytes);
  } catch (const Error& e) {
    Fail("policy state: ", e.what());
  }
}

std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace

void AddPolicyLearningOptions(CLI::App& cmd, PolicySetup& setup) {
  cmd.add_option("--learn-from", setup.learn_from,
                 "traces the policy learns from before it serves (comma-separated)")
      ->delimiter(',');
  cmd.add_option("--policy-state", setup.state_path,
                 "file of what the policy learned: loaded when it exists, saved at the end");
}

void AddPolicyWorkerOption(CLI::App& cmd, std::string& mode, const std::string& default_mode) {
  mode = default_mode;
  cmd.add_option("--policy-worker", mode,
                 "where heavy policy work runs: async (a worker thread), sync (inline, "
                 "deterministic), modelled (simulator: after its cost in simulated time)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sync", "async", "modelled"}));
}

tiers::PolicyMaker MakePolicyMaker(const PolicySetup& setup) {
  policy::ResolvePolicySpec(setup.spec);  // A bad spec fails before any long work.
  for (const std::string& path : setup.learn_from)
    Check(std::filesystem::is_regular_file(path), "--learn-from: no trace file ", path);
  auto learned = std::make_shared<std::map<std::string, std::string>>();
  return [setup, learned](const policy::PolicyFacts& facts) {
    std::unique_ptr<policy::Policy> p = policy::MakePolicy(setup.spec, facts);
    if (auto it = learned->find(p->name()); it != learned->end()) {
      policy::DecodePolicyState(*p, facts, AsBytes(it->second), "learned state of " + p->name());
      return p;
    }
    bool has_state = false;
    if (!setup.state_path.empty() && std::filesystem::exists(setup.state_path)) {
      Check(std::filesystem::is_regular_file(setup.state_path), "--policy-state ",
            setup.state_path, " exists and is not a file");
      const std::string bytes = ReadWholeFile(setup.state_path);
      policy::DecodePolicyState(*p, facts, AsBytes(bytes), setup.state_path);
      Log(LogLevel::kInfo, "policy ", p->name(), ": loaded state from ", setup.state_path);
      has_state = true;
    }
    if (!setup.learn_from.empty()) {
      const trace::LearningSummary s = trace::LearnFromTraces(*p, facts, setup.learn_from);
      Log(LogLevel::kInfo, "policy ", p->name(), ": learned from ", s.traces, " trace(s), ",
          s.requests, " requests, ", s.iterations, " passes in ", s.ms, " ms");
      has_state = true;
    }
    if (has_state) (*learned)[p->name()] = policy::EncodePolicyState(*p, facts);
    return p;
  };
}

void SavePolicyState(const PolicySetup& setup, const policy::Policy& policy,
                     const policy::PolicyFacts& facts) {
  if (setup.state_path.empty()) return;
  Check(!std::filesystem::is_directory(setup.state_path), "--policy-state ", setup.state_path,
        " is a directory");
  const std::string bytes = policy::EncodePolicyState(policy, facts);
  OutputFile out(setup.state_path);
  out.Write(bytes.data(), bytes.size());
  out.Commit();
}

}  // namespace moex::cli

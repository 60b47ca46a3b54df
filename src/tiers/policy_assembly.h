// How a driver's policy is chosen and built. PolicyOptions is filled once (by the command
// line, a test) and taken as is by the engine's host tier and by the simulator;
// AssembleController is the one place both build the policy, its worker and the
// OffloadController around them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "io/weight_source.h"
#include "model/model_config.h"
#include "policy/policy.h"
#include "policy/policy_worker.h"
#include "tiers/cache_plan.h"
#include "tiers/offload_controller.h"

namespace moex::tiers {

// Builds the policy from its facts. The CLI's maker also learns from traces and loads a
// saved state (src/cli/policy_setup.h); the default is policy::MakePolicy(spec, facts).
using PolicyMaker = std::function<std::unique_ptr<policy::Policy>(const policy::PolicyFacts&)>;

struct PolicyOptions {
  std::string spec = "lru";  // A policy spec (docs/policies.md).
  PolicyMaker make;          // Null: policy::MakePolicy(spec, facts).
  policy::PolicyWorker::Mode worker = policy::PolicyWorker::Mode::kAsync;
  uint64_t seed = 0;  // For randomised policies.
  // Changes the facts before the policy is built (routing replay: the trace's gate width
  // and router weights).
  std::function<void(policy::PolicyFacts&)> adjust_facts;
};

struct AssembledController {
  std::unique_ptr<OffloadController> controller;
  policy::PolicyFacts facts;  // What the policy was built with (for saving its state).
};

// The facts come from the model, the cache plan and the expert size (`weights`, may be null:
// the router tensors for predicting policies); then `driver` adds its own (the simulator's
// future demand, step costs and clock) and may configure the worker; then
// options.adjust_facts; then the policy is made, with the worker named in its facts.
AssembledController AssembleController(
    const PolicyOptions& options, const ModelConfig& config, const CacheGeometry& geometry,
    int64_t expert_bytes, const WeightSource* weights,
    const std::function<void(policy::PolicyFacts&, policy::PolicyWorker&)>& driver = {});

}  // namespace moex::tiers

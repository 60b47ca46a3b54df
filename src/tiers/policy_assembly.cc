#include "tiers/policy_assembly.h"

#include "policy/registry.h"

namespace moex::tiers {

AssembledController AssembleController(
    const PolicyOptions& options, const ModelConfig& config, const CacheGeometry& geometry,
    int64_t expert_bytes, const WeightSource* weights,
    const std::function<void(policy::PolicyFacts&, policy::PolicyWorker&)>& driver) {
  auto worker = std::make_unique<policy::PolicyWorker>(options.worker);
  AssembledController out;
  out.facts = MakePolicyFacts(config, geometry, expert_bytes, weights, options.seed);
  out.facts.worker = worker.get();
  if (driver) driver(out.facts, *worker);
  if (options.adjust_facts) options.adjust_facts(out.facts);
  std::unique_ptr<policy::Policy> policy =
      options.make ? options.make(out.facts) : policy::MakePolicy(options.spec, out.facts);
  out.controller = std::make_unique<OffloadController>(geometry, std::move(policy),
                                                       std::move(worker), out.facts.moe_layer);
  return out;
}

}  // namespace moex::tiers

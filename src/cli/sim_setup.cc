#include "cli/sim_setup.h"

#include "cli/policy_setup.h"

namespace moex::cli {

void AddSimFlags(CLI::App& cmd, SimFlags& flags) {
  cmd.add_option("--hardware", flags.hardware,
                 "built-in profile or a JSON file (moex sim --list-hardware)");
  cmd.add_option("--scale-to", flags.scale_to,
                 "cost experts as another model's: ARCH:SIZE (olmoe:full), config.json or "
                 "model dir");
  cmd.add_option("--chunk-neurons", flags.chunk_neurons, "transfer chunk (0 = as the engine)")
      ->check(CLI::Range(0, 1 << 20));
  cmd.add_option("--seed", flags.seed, "seed of randomised policies");
  AddPolicyWorkerOption(cmd, flags.worker, "modelled");
}

sim::ReplayOptions ReplayOptionsOf(const SimFlags& flags) {
  sim::ReplayOptions options;
  options.hardware = sim::LoadHardwareProfile(flags.hardware);
  options.chunk_neurons = flags.chunk_neurons;
  options.policy.seed = flags.seed;
  if (!flags.scale_to.empty()) {
    options.scale_to = sim::LoadScaleTarget(flags.scale_to);
    options.scale_name = flags.scale_to;
  }
  options.policy.worker = policy::PolicyWorker::ParseMode(flags.worker);
  return options;
}

}  // namespace moex::cli

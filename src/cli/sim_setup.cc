#include "cli/sim_setup.h"

namespace moex::cli {

sim::ReplayOptions ReplayOptionsOf(const SimFlags& flags) {
  sim::ReplayOptions options;
  options.hardware = sim::LoadHardwareProfile(flags.hardware);
  options.chunk_neurons = flags.chunk_neurons;
  options.seed = flags.seed;
  if (!flags.scale_to.empty()) {
    options.scale_to = sim::LoadScaleTarget(flags.scale_to);
    options.scale_name = flags.scale_to;
  }
  options.worker = policy::PolicyWorker::ParseMode(flags.worker);
  return options;
}

}  // namespace moex::cli

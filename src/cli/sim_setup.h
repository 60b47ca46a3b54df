// The simulator options that `moex sim` and `moex tune` share, read from their flags: the
// hardware profile, chunking, seed, the model to cost as (--scale-to) and the worker mode.
// Each is checked here, before a long replay starts.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "sim/replay.h"

namespace moex::cli {

struct SimFlags {
  std::string hardware = "this-machine";
  int chunk_neurons = 0;
  uint64_t seed = 0;
  std::string scale_to;
  std::string worker;
};

// Registers --hardware, --scale-to, --chunk-neurons, --seed and --policy-worker (modelled).
void AddSimFlags(CLI::App& cmd, SimFlags& flags);
sim::ReplayOptions ReplayOptionsOf(const SimFlags& flags);

}  // namespace moex::cli

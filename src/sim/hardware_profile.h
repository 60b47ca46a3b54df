// What the simulator's cost model knows about a machine: how fast the compute tier streams
// weights and multiplies, and how fast the link into the cache tier moves experts. The
// built-in profiles are this machine (measured) and common GPUs over PCIe (documented
// figures; sources in docs/simulator.md). `--hardware FILE.json` loads your own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moex::sim {

struct HardwareProfile {
  std::string name;
  std::string description;
  std::string source;           // Where the figures come from.
  std::string cache_tier;       // "host" (CPU-only: experts cached in RAM) or "device" (GPU).
  double compute_gb_per_s = 0;  // Weight streaming the compute tier achieves (decode).
  double compute_tflops = 0;    // Dense matrix-multiply rate achieved (prefill).
  double link_gb_per_s = 0;     // Slow tier -> cache tier (NVMe -> RAM, or RAM -> GPU).
  double link_latency_us = 0;   // Fixed cost per chunk transfer not hidden by queueing.
  // Chunk transfers committed to the link at once (the engine's storage link keeps 32 reads
  // in flight, a quarter kept for demand). 1, the default, is a serial link: a cancelled
  // prefetch costs nothing unless it already started, a demand waits for one chunk at most.
  int link_in_flight = 1;
  double op_overhead_us = 0;     // Fixed cost per expert computed (dispatch, kernel launch).
  double layer_overhead_us = 0;  // Fixed cost per decoder layer (norms, small ops, sync).
  int64_t cache_tier_bytes = 0;  // Memory of the cache tier, for context.
  // The network between hosts, for expert parallelism (`moex sim --ranks N`): achieved
  // bandwidth of one host's link and latency per message round. 0: no link given (the
  // built-in profiles carry none; `--network` picks one of sim/network_link.h's).
  std::string network;  // The link's name, for reports.
  double network_gb_per_s = 0;
  double network_latency_us = 0;
};

const std::vector<HardwareProfile>& BuiltinProfiles();
// A built-in name, or a path to a JSON file with the fields above. Throws Error listing
// the built-in names for anything else.
HardwareProfile LoadHardwareProfile(const std::string& name_or_path);
nlohmann::json ProfileToJson(const HardwareProfile& p);
HardwareProfile ProfileFromJson(const nlohmann::json& j);

}  // namespace moex::sim

// The network between the hosts of an expert-parallel run, as the simulator costs it: the
// bandwidth one host's link achieves and the latency of one message round (a scatter or a
// gather of rows, MPI point-to-point). The built-in links are common Ethernet speeds and one
// host's loopback (sources in docs/expert-parallel.md); `--network FILE.json` loads your own.
// A hardware profile may carry a link too (network_gb_per_s, network_latency_us): the
// compute and the network are chosen independently.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/hardware_profile.h"

namespace moex::sim {

struct NetworkLink {
  std::string name;
  std::string description;
  std::string source;     // Where the figures come from.
  double gb_per_s = 0;    // Achieved payload bandwidth of one host's link, each direction.
  double latency_us = 0;  // Fixed cost of one message round (send and completion).
};

const std::vector<NetworkLink>& BuiltinNetworkLinks();
// A built-in name, or a path to a JSON file {"name", "gb_per_s", "latency_us", ...}.
// Throws Error listing the built-in names for anything else.
NetworkLink LoadNetworkLink(const std::string& name_or_path);
nlohmann::json NetworkLinkToJson(const NetworkLink& link);
NetworkLink NetworkLinkFromJson(const nlohmann::json& j);

// The profile with its network link replaced by `link`.
HardwareProfile WithNetwork(HardwareProfile profile, const NetworkLink& link);

}  // namespace moex::sim

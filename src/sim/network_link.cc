#include "sim/network_link.h"

#include "core/error.h"
#include "io/input_file.h"

namespace moex::sim {

namespace {

NetworkLink Link(const char* name, const char* description, const char* source, double gb_per_s,
                 double latency_us) {
  return {name, description, source, gb_per_s, latency_us};
}

// Ethernet payload: the line rate less Ethernet, IP and TCP framing at a 1500-byte MTU
// (1448 payload bytes in 1538 on the wire: 94 %); latencies are typical MPI point-to-point
// one-way figures over TCP for a round of row messages (docs/expert-parallel.md).
std::vector<NetworkLink> MakeBuiltins() {
  return {
      Link("loopback", "several ranks on one host (Open MPI shared memory)",
           "measured on this 2-vCPU host: MPI ping-pong of 1 MiB messages, one way "
           "(docs/expert-parallel.md)",
           2.0, 5),
      Link("10gbe", "10 Gigabit Ethernet, MPI over TCP",
           "line rate 1.25 GB/s x 94 % TCP payload; ~40 us one-way MPI latency over TCP", 1.17, 40),
      Link("25gbe", "25 Gigabit Ethernet, MPI over TCP",
           "line rate 3.125 GB/s x ~99 % with jumbo frames ~ 3.1 GB/s usable; ~30 us one-way "
           "MPI latency over TCP (the figures of the plan in docs/expert-parallel.md)",
           3.1, 30),
      Link("100gbe", "100 Gigabit Ethernet with RDMA (RoCE v2)",
           "line rate 12.5 GB/s x ~93 % achieved by MPI over verbs; ~5 us one-way latency", 11.6,
           5),
  };
}

}  // namespace

const std::vector<NetworkLink>& BuiltinNetworkLinks() {
  static const std::vector<NetworkLink> links = MakeBuiltins();
  return links;
}

nlohmann::json NetworkLinkToJson(const NetworkLink& link) {
  return {{"name", link.name},
          {"description", link.description},
          {"source", link.source},
          {"gb_per_s", link.gb_per_s},
          {"latency_us", link.latency_us}};
}

NetworkLink NetworkLinkFromJson(const nlohmann::json& j) {
  Check(j.is_object(), "network link: expected a JSON object");
  NetworkLink link;
  link.name = j.value("name", std::string("custom"));
  link.description = j.value("description", std::string());
  link.source = j.value("source", std::string("user-supplied"));
  auto number = [&j, &link](const char* key) {
    Check(j.contains(key) && j.at(key).is_number(), "network link ", link.name, ": '", key,
          "' is missing or not a number");
    return j.at(key).get<double>();
  };
  link.gb_per_s = number("gb_per_s");
  link.latency_us = number("latency_us");
  Check(link.gb_per_s > 0, "network link ", link.name, ": 'gb_per_s' must be positive, not ",
        link.gb_per_s);
  Check(link.latency_us >= 0, "network link ", link.name,
        ": 'latency_us' must not be negative, not ", link.latency_us);
  return link;
}

NetworkLink LoadNetworkLink(const std::string& name_or_path) {
  for (const NetworkLink& link : BuiltinNetworkLinks())
    if (link.name == name_or_path) return link;
  if (RegularFileExists(name_or_path)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(ReadInputFile(name_or_path, kMaxConfigFileBytes));
    } catch (const nlohmann::json::exception& e) {
      Fail("network link ", name_or_path, " is not valid JSON: ", e.what());
    }
    return NetworkLinkFromJson(j);
  }
  std::string names;
  for (const NetworkLink& link : BuiltinNetworkLinks())
    names += (names.empty() ? "" : ", ") + link.name;
  Fail("unknown network link '", name_or_path, "' (built-in: ", names,
       "; or a path to a JSON file with gb_per_s and latency_us)");
}

HardwareProfile WithNetwork(HardwareProfile profile, const NetworkLink& link) {
  profile.network = link.name;
  profile.network_gb_per_s = link.gb_per_s;
  profile.network_latency_us = link.latency_us;
  return profile;
}

}  // namespace moex::sim

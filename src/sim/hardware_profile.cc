#include "sim/hardware_profile.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/input_file.h"

namespace moex::sim {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
// Datasheet peaks are not what kernels achieve: decode GEMV reaches ~80% of peak memory
// bandwidth, batched BF16 GEMM ~60% of peak tensor throughput, and pinned host-to-device
// copies ~80% of the PCIe x16 link (docs/simulator.md gives the sources).
constexpr double kMemoryEfficiency = 0.8;
constexpr double kTensorEfficiency = 0.6;
constexpr double kPcie4GBps = 31.5 * 0.8;
constexpr double kPcie5GBps = 63.0 * 0.8;

HardwareProfile Gpu(const char* name, const char* description, double hbm_gb_per_s,
                    double bf16_dense_tflops, double pcie_gb_per_s, double memory_gib) {
  HardwareProfile p;
  p.name = name;
  p.description = description;
  p.source = "vendor datasheet peaks x efficiency (docs/simulator.md)";
  p.cache_tier = "device";
  p.compute_gb_per_s = hbm_gb_per_s * kMemoryEfficiency;
  p.compute_tflops = bf16_dense_tflops * kTensorEfficiency;
  p.link_gb_per_s = pcie_gb_per_s;
  p.link_latency_us = 10;    // cudaMemcpyAsync issue + completion per chunk.
  p.op_overhead_us = 5;      // One kernel launch per expert.
  p.layer_overhead_us = 30;  // Attention, norms, router and sync per layer.
  p.cache_tier_bytes = static_cast<int64_t>(memory_gib * kGiB);
  return p;
}

std::vector<HardwareProfile> MakeBuiltins() {
  std::vector<HardwareProfile> v;
  HardwareProfile cpu;
  cpu.name = "this-machine";
  cpu.description = "2-core Sapphire Rapids VM, experts on NVMe cached in host RAM (CPU-only)";
  cpu.source =
      "measured: `moex bench` decode weight streaming on OLMoE small (21-29 GB/s after the "
      "decode work), kernels_bench BF16 GEMM (~0.1 TFLOP/s), dd O_DIRECT read of the expert "
      "store (1.5 GB/s); overheads fitted to the demo model's measured decode step "
      "(docs/simulator.md)";
  cpu.cache_tier = "host";
  cpu.compute_gb_per_s = 23;
  cpu.compute_tflops = 0.1;
  cpu.link_gb_per_s = 1.5;
  cpu.link_latency_us = 0;  // 32 reads in flight hide the per-read latency.
  cpu.op_overhead_us = 1;
  cpu.layer_overhead_us = 10;
  cpu.cache_tier_bytes = static_cast<int64_t>(24 * kGiB);
  v.push_back(cpu);
  v.push_back(
      Gpu("rtx3090", "NVIDIA GeForce RTX 3090 24 GB over PCIe 4.0 x16", 936, 71, kPcie4GBps, 24));
  v.push_back(Gpu("rtx4090", "NVIDIA GeForce RTX 4090 24 GB over PCIe 4.0 x16", 1008, 165.2,
                  kPcie4GBps, 24));
  v.push_back(Gpu("a5000", "NVIDIA RTX A5000 24 GB over PCIe 4.0 x16", 768, 111.1, kPcie4GBps, 24));
  v.push_back(Gpu("a6000", "NVIDIA RTX A6000 48 GB over PCIe 4.0 x16", 768, 154.8, kPcie4GBps, 48));
  v.push_back(Gpu("a40", "NVIDIA A40 48 GB over PCIe 4.0 x16", 696, 149.7, kPcie4GBps, 48));
  v.push_back(Gpu("h100-pcie4", "NVIDIA H100 PCIe 80 GB in a PCIe 4.0 x16 host", 2000, 756,
                  kPcie4GBps, 80));
  v.push_back(
      Gpu("h100-pcie5", "NVIDIA H100 PCIe 80 GB over PCIe 5.0 x16", 2000, 756, kPcie5GBps, 80));
  return v;
}

}  // namespace

const std::vector<HardwareProfile>& BuiltinProfiles() {
  static const std::vector<HardwareProfile> profiles = MakeBuiltins();
  return profiles;
}

nlohmann::json ProfileToJson(const HardwareProfile& p) {
  nlohmann::json j = {{"name", p.name},
                      {"description", p.description},
                      {"source", p.source},
                      {"cache_tier", p.cache_tier},
                      {"compute_gb_per_s", p.compute_gb_per_s},
                      {"compute_tflops", p.compute_tflops},
                      {"link_gb_per_s", p.link_gb_per_s},
                      {"link_latency_us", p.link_latency_us},
                      {"link_in_flight", p.link_in_flight},
                      {"op_overhead_us", p.op_overhead_us},
                      {"layer_overhead_us", p.layer_overhead_us},
                      {"cache_tier_bytes", p.cache_tier_bytes}};
  if (p.network_gb_per_s > 0) {  // Only a profile with a network link names one.
    j["network"] = p.network;
    j["network_gb_per_s"] = p.network_gb_per_s;
    j["network_latency_us"] = p.network_latency_us;
  }
  return j;
}

HardwareProfile ProfileFromJson(const nlohmann::json& j) {
  HardwareProfile p;
  auto number = [&j](const char* key) {
    Check(j.contains(key) && j.at(key).is_number(), "hardware profile: '", key,
          "' is missing or not a number");
    const double v = j.at(key).get<double>();
    Check(v >= 0, "hardware profile: '", key, "' must not be negative");
    return v;
  };
  Check(j.is_object(), "hardware profile: expected a JSON object");
  p.name = j.value("name", std::string("custom"));
  p.description = j.value("description", std::string());
  p.source = j.value("source", std::string("user-supplied"));
  p.cache_tier = j.value("cache_tier", std::string("host"));
  p.compute_gb_per_s = number("compute_gb_per_s");
  p.compute_tflops = number("compute_tflops");
  p.link_gb_per_s = number("link_gb_per_s");
  p.link_latency_us = j.contains("link_latency_us") ? number("link_latency_us") : 0;
  p.op_overhead_us = j.contains("op_overhead_us") ? number("op_overhead_us") : 0;
  if (j.contains("link_in_flight")) {
    const double v = number("link_in_flight");
    Check(v >= 1 && v <= 4096 && v == static_cast<int>(v), "hardware profile: 'link_in_flight' ",
          "must be a whole number of transfers from 1 to 4096, not ", v);
    p.link_in_flight = static_cast<int>(v);
  }
  p.layer_overhead_us = j.contains("layer_overhead_us") ? number("layer_overhead_us") : 0;
  p.cache_tier_bytes =
      j.contains("cache_tier_bytes") ? static_cast<int64_t>(number("cache_tier_bytes")) : 0;
  if (j.contains("network_gb_per_s")) {
    p.network_gb_per_s = number("network_gb_per_s");
    Check(p.network_gb_per_s > 0, "hardware profile ", p.name,
          ": 'network_gb_per_s' must be positive (leave it out for no network link)");
    p.network = j.value("network", p.name + " network");
    p.network_latency_us = j.contains("network_latency_us") ? number("network_latency_us") : 0;
  } else {
    Check(!j.contains("network_latency_us"), "hardware profile ", p.name,
          ": 'network_latency_us' without 'network_gb_per_s'");
  }
  Check(p.compute_gb_per_s > 0 && p.compute_tflops > 0 && p.link_gb_per_s > 0, "hardware profile ",
        p.name, ": bandwidths and throughput must be positive");
  return p;
}

HardwareProfile LoadHardwareProfile(const std::string& name_or_path) {
  for (const HardwareProfile& p : BuiltinProfiles())
    if (p.name == name_or_path) return p;
  if (RegularFileExists(name_or_path)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(ReadInputFile(name_or_path, kMaxConfigFileBytes));
    } catch (const nlohmann::json::exception& e) {
      Fail("hardware profile ", name_or_path, " is not valid JSON: ", e.what());
    }
    return ProfileFromJson(j);
  }
  std::string names;
  for (const HardwareProfile& p : BuiltinProfiles()) names += (names.empty() ? "" : ", ") + p.name;
  Fail("unknown hardware profile '", name_or_path, "' (built-in: ", names,
       "; or a path to a JSON profile)");
}

}  // namespace moex::sim

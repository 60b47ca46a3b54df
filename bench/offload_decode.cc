// Decode throughput of the offloading executor across host budgets and policies, on a
// random model in a real shape (generated on first use), with hit rate, bytes per token,
// achieved read bandwidth and stall. One JSON object per configuration on stdout.
//
//   offload_decode --model DIR [--arch olmoe --size full] [--budgets 100%,50%,25%,10%]
//                  [--policies lru,lfu,random,nextgate] [--prompt-tokens 16] [--gen-tokens 16]
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "model/random_model.h"

namespace {

// A field of /proc/self/status in bytes (VmRSS, VmHWM).
int64_t ProcStatusBytes(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, field, std::strlen(field)) == 0)
      kb = std::atoll(line + std::strlen(field) + 1);
  }
  std::fclose(f);
  return kb * 1024;
}

// The first three fields of /proc/loadavg (1, 5 and 15 minutes).
std::string LoadAverage() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return "";
  char buf[128] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok) return "";
  std::string s(buf);
  size_t pos = 0;
  for (int field = 0; field < 3 && pos != std::string::npos; ++field) pos = s.find(' ', pos + 1);
  return s.substr(0, pos);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moex;
  std::string model_dir = "/data/olmoe-full", arch = "olmoe", size = "full";
  std::string budgets = "10%,25%,50%,100%", policies = "lru,lfu,random,nextgate";
  int prompt_tokens = 16, gen_tokens = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model_dir = v;
    else if (k == "--arch")
      arch = v;
    else if (k == "--size")
      size = v;
    else if (k == "--budgets")
      budgets = v;
    else if (k == "--policies")
      policies = v;
    else if (k == "--prompt-tokens")
      prompt_tokens = std::stoi(v);
    else if (k == "--gen-tokens")
      gen_tokens = std::stoi(v);
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  try {
    if (!std::filesystem::exists(std::filesystem::path(model_dir) / "config.json")) {
      std::cerr << "writing random " << arch << " " << size << " model to " << model_dir << "\n";
      RandomModelOptions o;
      o.config = RandomModelConfig(ParseArch(arch), ParseModelSize(size));
      o.out = model_dir;
      o.seed = 1;
      WriteRandomModel(o);
    }
    auto model = LoadModel(model_dir);
    GenerationRequest request;
    for (int i = 0; i < prompt_tokens; ++i) request.prompt.push_back(100 + 37 * i);
    request.max_tokens = gen_tokens;
    for (const std::string& policy : Split(policies)) {
      for (const std::string& budget : Split(budgets)) {
        OffloadOptions o;
        o.host_budget = budget;
        o.policy.spec = policy;
        Stopwatch open;
        OffloadMoeExecutor executor(*model, o);
        const double open_ms = open.ElapsedMs();
        Transformer transformer(*model, executor);
        Generator generator(transformer);
        // Decode-phase counters: snapshot when the first token (the end of prefill) lands.
        tiers::OffloadMetrics before;
        bool snapped = false;
        const auto results = generator.Generate({request}, [&](size_t, int32_t) {
          if (!snapped) before = executor.Metrics();
          snapped = true;
        });
        const tiers::OffloadMetrics after = executor.Metrics();
        const GenerationTimings& t = generator.timings();
        const double decode_s = t.decode_ms / 1000.0;
        const int64_t decode_tokens = t.decode_steps;
        nlohmann::json j;
        j["policy"] = policy;
        j["budget"] = budget;
        j["open_ms"] = open_ms;
        j["prefill_ms"] = t.prefill_ms;
        j["decode_ms"] = t.decode_ms;
        j["decode_tokens"] = decode_tokens;
        j["decode_tokens_per_s"] = decode_s > 0 ? decode_tokens / decode_s : 0.0;
        j["tokens"] = results[0].tokens;
        const double bytes = static_cast<double>(after.total.bytes_read - before.total.bytes_read);
        j["bytes_read"] = bytes;
        const double busy = after.io_busy_ms - before.io_busy_ms;
        j["decode_bytes_per_token"] = bytes / std::max<int64_t>(1, decode_tokens);
        j["decode_read_gb_per_s_while_busy"] = busy > 0 ? bytes / 1e6 / busy : 0.0;
        j["decode_read_gb_per_s_wall"] = decode_s > 0 ? bytes / 1e9 / decode_s : 0.0;
        const int64_t hits = after.total.counters.hits - before.total.counters.hits;
        const int64_t misses = after.total.counters.misses - before.total.counters.misses;
        j["decode_hit_rate"] = hits + misses ? static_cast<double>(hits) / (hits + misses) : 0.0;
        const double stall = after.total.stall_ms - before.total.stall_ms;
        j["decode_stall_ms"] = stall;
        // Decode-phase I/O: wall time with a read in flight, the part of it the compute did
        // not wait for (hidden behind compute), and the compute time per token (decode time
        // less the stall).
        j["decode_io_busy_ms"] = busy;
        j["decode_overlap_ms"] = after.overlap_ms - before.overlap_ms;
        j["decode_io_hidden_share"] =
            busy > 0 ? (after.overlap_ms - before.overlap_ms) / busy : 0.0;
        j["decode_compute_ms_per_token"] =
            (t.decode_ms - stall) / static_cast<double>(std::max<int64_t>(1, decode_tokens));
        j["decode_misses_per_token"] =
            static_cast<double>(misses) / static_cast<double>(std::max<int64_t>(1, decode_tokens));
        j["expert_bytes"] = model->expert_shape.ExpertBytes();
        j["loadavg"] = LoadAverage();
        j["rss_bytes"] = ProcStatusBytes("VmRSS");
        j["peak_rss_bytes"] = ProcStatusBytes("VmHWM");  // Budgets run in ascending order.
        j["offload"] = after.ToJson();
        j["offload"].erase("layers");
        std::cout << j.dump() << std::endl;
      }
    }
  } catch (const Error& e) {
    std::cerr << "offload_decode: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

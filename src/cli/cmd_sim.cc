// `moex sim`: replays a routing trace through offloading policies at cache budgets and
// reports hit rates, bytes moved and modelled latency (docs/simulator.md). Lists of
// policies and budgets give a sweep; --html draws it.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/policy_setup.h"
#include "cli/sim_setup.h"
#include "core/error.h"
#include "core/progress.h"
#include "dist/expert_placement.h"
#include "io/output_file.h"
#include "io/output_guard.h"
#include "policy/policy_spec.h"
#include "policy/registry.h"
#include "sim/network_link.h"
#include "sim/replay.h"
#include "sim/sweep_report.h"

namespace moex::cli {

namespace {

struct SimOptions {
  std::string trace;
  std::string policies = "lru";
  std::string budgets = "25%";
  SimFlags sim;          // --hardware, --scale-to, --chunk-neurons, --seed, --policy-worker.
  PolicySetup learning;  // --learn-from, --policy-state (spec set per policy).
  std::string html;
  bool force = false;  // --force: --html may replace a file that is not a sim page.
  bool json = false;
  bool list_hardware = false;
  // Expert parallelism (docs/expert-parallel.md, "The simulator's model").
  int ranks = 1;
  std::string placement;  // A placement file; empty: balanced by the trace's routing.
  std::string network;    // A built-in link or a JSON file; empty: the profile's own.
  bool list_network = false;
};

std::vector<std::string> SplitBudgets(const std::string& text, const char* what) {
  std::vector<std::string> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ','))
    if (!item.empty()) out.push_back(item);
  Check(!out.empty(), "empty ", what, " list");
  return out;
}

std::string Describe(const sim::HardwareProfile& hw) {
  return hw.name + (hw.description.empty() ? "" : ": " + hw.description);
}

// One line per policy and budget: what a person reads; --json has every counter.
void PrintTable(const std::string& trace, const std::string& model, const sim::HardwareProfile& hw,
                const std::vector<sim::ReplayResult>& results) {
  auto ms = [](bool timed, double v) {
    char text[32] = "-";
    if (timed) std::snprintf(text, sizeof text, "%.2f", v);
    return std::string(text);
  };
  std::printf("trace %s, model %s, hardware %s\n", trace.c_str(), model.c_str(), hw.name.c_str());
  std::printf("%-18s %7s %9s %12s %14s %9s %9s\n", "policy", "budget", "hit rate", "decode hits",
              "B/decoded tok", "TPOT ms", "TTFT ms");
  for (const sim::ReplayResult& r : results)
    std::printf("%-18s %6.1f%% %9.3f %12.3f %14.0f %9s %9s\n", r.policy.c_str(),
                100 * r.budget_fraction, r.hit_rate(), r.decode_hit_rate(),
                r.decode_bytes_per_token(), ms(r.timed, r.tpot_ms).c_str(),
                ms(r.timed, r.ttft_ms).c_str());
  for (const sim::ReplayResult& r : results) {
    if (!r.expert_parallel) continue;
    const sim::ExpertParallelResult& x = *r.expert_parallel;
    const double tokens = static_cast<double>(r.prefill_tokens + r.decode_tokens);
    std::printf("\n%s at %.1f%%: %d ranks on %s (%.2f GB/s, %.1f us per message round)\n",
                r.policy.c_str(), 100 * r.budget_fraction, x.ranks, x.network.c_str(),
                x.network_gb_per_s, x.network_latency_us);
    std::printf(
        "  network: %.0f B per token (%.0f per decoded token), %lld input and %lld "
        "output rows\n",
        tokens > 0 ? static_cast<double>(x.bytes_sent + x.bytes_received) / tokens : 0,
        r.decode_tokens
            ? static_cast<double>(x.decode_network_bytes) / static_cast<double>(r.decode_tokens)
            : 0,
        static_cast<long long>(x.input_rows), static_cast<long long>(x.output_rows));
    if (r.timed) {
      std::printf(
          "  time: %.2f ms = rank 0 attention/dense/head %.2f + experts (slowest rank) "
          "%.2f + storage stall %.2f + network %.2f\n",
          r.total_ms, x.rank0_other_ms, x.expert_compute_ms, x.expert_stall_ms, x.network_ms);
      if (r.decode_tokens > 0) {
        const double n = static_cast<double>(r.decode_tokens);
        std::printf(
            "  decode: %.2f tokens/s (TPOT %.2f ms); per decoded token %.2f + %.2f + "
            "%.2f + %.2f ms\n",
            r.tpot_ms > 0 ? 1e3 / r.tpot_ms : 0, r.tpot_ms, x.decode_rank0_other_ms / n,
            x.decode_expert_compute_ms / n, r.decode_stall_ms / n, x.decode_network_ms / n);
      }
    }
    std::printf("  %-5s %8s %10s %8s %8s %14s %12s %10s %12s %12s\n", "rank", "experts",
                "budget MiB", "hits", "misses", "storage bytes", "compute ms", "stall ms",
                "net in B", "net out B");
    for (const sim::RankReplay& k : x.per_rank)
      std::printf("  %-5d %8lld %10.1f %8lld %8lld %14lld %12.2f %10.2f %12lld %12lld\n", k.rank,
                  static_cast<long long>(k.experts),
                  static_cast<double>(k.budget_bytes) / (1024.0 * 1024.0),
                  static_cast<long long>(k.total.hits), static_cast<long long>(k.total.misses),
                  static_cast<long long>(k.bytes_read), k.expert_compute_ms, k.stall_ms,
                  static_cast<long long>(k.network_bytes_in),
                  static_cast<long long>(k.network_bytes_out));
  }
}

int RunSim(const SimOptions& o) {
  if (o.list_hardware) {
    nlohmann::json list = nlohmann::json::array();
    for (const sim::HardwareProfile& p : sim::BuiltinProfiles())
      list.push_back(sim::ProfileToJson(p));
    std::cout << list.dump(2) << "\n";
    return 0;
  }
  if (o.list_network) {
    nlohmann::json list = nlohmann::json::array();
    for (const sim::NetworkLink& link : sim::BuiltinNetworkLinks())
      list.push_back(sim::NetworkLinkToJson(link));
    std::cout << list.dump(2) << "\n";
    return 0;
  }
  Check(!o.trace.empty(), "--trace is required");
  if (!o.html.empty()) {
    std::vector<std::string> reads = o.learning.learn_from;
    for (const std::string& p :
         {o.trace, o.sim.hardware, o.sim.scale_to, o.learning.state_path, o.placement, o.network})
      reads.push_back(p);
    CheckOutputPath(o.html, {.flag = "--html",
                             .reads = reads,
                             .force = o.force,
                             .same_kind = [](const std::string& existing) {
                               return FileStartsWith(existing, sim::kSweepHtmlStart);
                             }});
  }
  // Arguments first: a bad one fails before a long read.
  sim::ReplayOptions options = ReplayOptionsOf(o.sim);
  if (!o.network.empty())
    options.hardware = sim::WithNetwork(options.hardware, sim::LoadNetworkLink(o.network));
  options.ranks = o.ranks;
  if (!o.placement.empty()) options.placement = dist::ExpertPlacement::Load(o.placement);
  Check(o.learning.state_path.empty() || o.ranks == 1,
        "--policy-state saves one policy; with --ranks ", o.ranks,
        " every rank has its own (run without --policy-state)");
  const std::vector<std::string> policies = policy::SplitPolicyList(o.policies);
  const std::vector<std::string> budgets = SplitBudgets(o.budgets, "budget");
  Check(o.learning.state_path.empty() || policies.size() * budgets.size() == 1,
        "--policy-state takes one policy and one budget (a sweep would save many states)");
  std::vector<tiers::PolicyMaker> makers;
  for (const std::string& spec : policies) {  // Every spec is checked before a long read.
    PolicySetup setup = o.learning;
    setup.spec = spec;
    makers.push_back(MakePolicyMaker(setup));
  }
  trace::TraceReader reader(o.trace);

  policy::FutureDemand future;
  bool have_future = false;
  std::vector<sim::ReplayResult> results;
  Progress progress("simulated policy x budget points",
                    policies.size() * budgets.size() > 1
                        ? static_cast<int64_t>(policies.size() * budgets.size())
                        : 0);
  for (size_t i = 0; i < policies.size(); ++i) {
    if (policy::SpecNeedsFuture(policies[i]) && !have_future) {
      future = sim::ReadFutureDemand(reader);
      have_future = true;
    }
    PolicySetup setup = o.learning;
    setup.spec = policies[i];
    options.policy.make = makers[i];
    options.on_finish = [setup](const policy::Policy& p, const policy::PolicyFacts& f) {
      SavePolicyState(setup, p, f);
    };
    for (const std::string& budget : budgets) {
      options.policy.spec = policies[i];
      options.budget = budget;
      results.push_back(sim::Replay(reader, options, have_future ? &future : nullptr));
      progress.Update(static_cast<int64_t>(results.size()));
    }
  }

  const trace::TraceHeader& h = reader.header();
  const std::string model =
      h.model.name +
      (o.sim.scale_to.empty() ? "" : " (expert sizes and compute of " + o.sim.scale_to + ")");
  nlohmann::json out = {{"trace", o.trace},
                        {"model", model},
                        {"hardware", sim::ProfileToJson(options.hardware)},
                        {"results", nlohmann::json::array()}};
  for (const sim::ReplayResult& r : results) out["results"].push_back(r.ToJson());

  if (!o.html.empty()) {
    sim::SweepReport report;
    report.title = "moex policy sweep";
    report.trace = o.trace + " (" + h.source + ", " + std::to_string(h.model.moe_layers.size()) +
                   " MoE layers x " + std::to_string(h.model.num_experts) + " experts)";
    report.model = model;
    report.hardware = Describe(options.hardware);
    for (const sim::ReplayResult& r : results)
      report.points.push_back({r.policy, r.budget_fraction, r.budget_bytes, r.hit_rate(),
                               r.decode_bytes_per_token(), r.tpot_ms, r.ttft_ms});
    for (const sim::ReplayResult& r : results)
      for (sim::LayerProfile& p : sim::LayerProfilesOf(
               r.policy_report,
               r.policy + " at " +
                   std::to_string(static_cast<int>(std::lround(r.budget_fraction * 100))) + " %"))
        report.layer_profiles.push_back(std::move(p));
    const std::string page = sim::RenderSweepHtml(report);
    OutputFile file(o.html);
    file.Write(page.data(), page.size());
    file.Commit();
  }
  if (o.json) {
    if (results.size() == 1) {
      nlohmann::json one = results[0].ToJson();
      one["trace"] = out["trace"];
      one["model"] = out["model"];
      one["hardware"] = out["hardware"];
      std::cout << one.dump(2) << "\n";
    } else {
      std::cout << out.dump(2) << "\n";
    }
  } else {
    PrintTable(o.trace, model, options.hardware, results);
  }
  return 0;
}

}  // namespace

Runner AddSimCommand(CLI::App& app) {
  auto o = std::make_shared<SimOptions>();
  CLI::App* cmd = app.add_subcommand("sim", "replay a routing trace through offloading policies");
  cmd->add_option("--trace", o->trace, "trace file (moex trace record / import)");
  cmd->add_option("--policy", o->policies,
                  "policy spec, or a comma-separated list (`moex policies` lists them)")
      ->capture_default_str();
  cmd->add_option("--budget", o->budgets,
                  "cache budget: bytes (4GiB) or share of expert bytes (25%); a list sweeps");
  AddSimFlags(*cmd, o->sim);
  AddPolicyLearningOptions(*cmd, o->learning);
  cmd->add_option("--html", o->html, "write the sweep as a self-contained HTML page");
  cmd->add_flag("--force", o->force, "replace an existing --html file that is not a sim page");
  cmd->add_flag("--json", o->json,
                "print JSON (one object; a sweep lists its results) instead of a table");
  cmd->add_flag("--list-hardware", o->list_hardware, "print the built-in hardware profiles");
  cmd->add_option("--ranks", o->ranks,
                  "model expert parallelism over N hosts (layout A: attention on rank 0); the "
                  "budget applies per rank")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cmd->add_option("--placement", o->placement,
                  "expert placement file (default: balanced by the trace's routing)");
  cmd->add_option("--network", o->network,
                  "network link between ranks: built-in or a JSON file (--list-network)");
  cmd->add_flag("--list-network", o->list_network, "print the built-in network links");
  return [o] { return RunSim(*o); };
}

}  // namespace moex::cli

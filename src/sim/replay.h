// The trace-replay simulator: drives a recorded event stream through the same
// OffloadController (cache + policy objects) the engine uses, executes its commands on a
// modelled link, and times each pass with the cost model. Hits, misses and prefetch counts
// are exactly the engine's for the same events, budget and policy; times are modelled.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/expert_placement.h"
#include "model/model_config.h"
#include "policy/future_demand.h"
#include "sim/hardware_profile.h"
#include "tiers/offload_controller.h"
#include "tiers/policy_assembly.h"
#include "trace/trace_reader.h"

namespace moex::sim {

struct ReplayOptions {
  // The policy worker's jobs land after their cost in simulated time by default (kModelled);
  // kSync: at once (what the engine does with --policy-worker sync).
  ReplayOptions() { policy.worker = policy::PolicyWorker::Mode::kModelled; }
  // The policy as the engine takes it (its maker, the CLI's, learns from traces and loads
  // state first).
  tiers::PolicyOptions policy;
  // Called once the replay ended (e.g. to save what the policy learned online).
  std::function<void(const policy::Policy&, const policy::PolicyFacts&)> on_finish;
  std::string budget = "25%";  // Bytes ("4GiB") or a share of the experts the trace covers.
  HardwareProfile hardware;
  int chunk_neurons = 0;  // 0: as the engine chooses for this expert geometry.
  // Cost experts and dense layers as this model instead of the one that produced the trace
  // (same experts per layer; its layers must include the trace's). E.g. replay the demo
  // model's OLMoE-shaped routing with OLMoE-1B-7B's real expert bytes.
  std::optional<ModelConfig> scale_to;
  std::string scale_name;  // For reports.
  // Expert parallelism (layout A of docs/expert-parallel.md) over `ranks` hosts joined by the
  // hardware profile's network link. Each rank has its own tier stack: its own cache of
  // `budget` (a byte budget is per rank; a share is of the rank's own experts), its own
  // policy instance fed only the gates of its own experts. 1: one process, as before.
  int ranks = 1;
  // Which rank owns each expert; unset: dist::ExpertPlacement::Balanced over the trace's
  // routed-token counts (trace::RoutedTokenCounts).
  std::optional<dist::ExpertPlacement> placement;
};

// One rank of an expert-parallel replay.
struct RankReplay {
  int rank = 0;
  int64_t experts = 0;  // Routed experts it owns, over all layers.
  int64_t budget_bytes = 0;
  int64_t capacity_experts = 0;
  // Its stack's counters; prefetch_foreign: prefetches its policy asked for experts of other
  // ranks (ignored: it holds no copy of them).
  tiers::LayerCounters total;
  int64_t bytes_read = 0;         // From its storage into its cache.
  int64_t network_bytes_in = 0;   // Input rows it received from rank 0.
  int64_t network_bytes_out = 0;  // Output rows it sent back.
  double expert_compute_ms = 0, stall_ms = 0, io_busy_ms = 0;
  nlohmann::json ToJson(int64_t page_bytes) const;
};

// What the network and the ranks add to a replay with ranks > 1. The pass time splits into
// rank 0's own work (attention, dense layers, head, overheads), the expert phases of each
// MoE layer on its slowest rank (compute and storage stall) and the exchanges.
struct ExpertParallelResult {
  int ranks = 0;
  std::string network;
  double network_gb_per_s = 0, network_latency_us = 0;
  nlohmann::json placement;  // dist::ExpertPlacement::ToJson.
  int64_t input_rows = 0, output_rows = 0;
  int64_t bytes_sent = 0, bytes_received = 0;  // On rank 0's link.
  int64_t decode_network_bytes = 0;            // In decode-only passes.
  double network_ms = 0, decode_network_ms = 0;
  // The split of decode-only passes (with decode_stall_ms and decode_network_ms).
  double decode_rank0_other_ms = 0, decode_expert_compute_ms = 0;
  double rank0_other_ms = 0;     // Rank 0's attention, dense layers, head and overheads.
  double expert_compute_ms = 0;  // On each layer's slowest rank.
  double expert_stall_ms = 0;    // Storage stalls of each layer's slowest rank.
  std::vector<RankReplay> per_rank;
};

struct ReplayResult {
  std::string policy;
  int64_t budget_bytes = 0;
  double budget_fraction = 0;  // Of the bytes of every expert the trace covers.
  int64_t capacity_experts = 0;
  int64_t expert_bytes = 0;
  int64_t page_bytes = 0;
  std::vector<tiers::LayerCounters> layers;  // Per decoder layer (zero for dense layers).
  tiers::LayerCounters total;
  int64_t decode_hits = 0, decode_misses = 0;  // In passes that only decode.

  int64_t requests = 0, iterations = 0, prefill_tokens = 0, decode_tokens = 0;
  int64_t bytes_read = 0, demand_bytes = 0;
  int64_t released_in_flight_bytes = 0;  // Read for pages released while in flight.
  int64_t decode_bytes_read = 0;

  std::string worker;  // The policy worker's mode.
  tiers::PolicyTiming policy_timing;
  nlohmann::json predictions;    // tiers::PredictionMetrics::ToJson.
  nlohmann::json policy_report;  // Policy::ReportJson at the end (null when it adds nothing).

  bool timed = false;  // False when the trace has no model shape to cost.
  double total_ms = 0, stall_ms = 0, io_busy_ms = 0;
  double decode_stall_ms = 0;       // Stalls within decode-only passes.
  double ttft_ms = 0, tpot_ms = 0;  // Means over requests.

  // Set when ranks > 1; the counters above are then sums over the ranks (stall_ms: the
  // critical path's), predictions and policy_report rank 0's.
  std::optional<ExpertParallelResult> expert_parallel;

  double hit_rate() const;
  double decode_hit_rate() const;
  double bytes_per_token() const;
  double decode_bytes_per_token() const;
  nlohmann::json ToJson() const;
};

// The ModelConfig the trace's policies see: its embedded config, or one synthesised from
// the trace's shape (imported logs).
ModelConfig TraceConfig(const trace::TraceHeader& header);
// Every gate's routed experts, for Belady. Rewinds the reader before and after.
policy::FutureDemand ReadFutureDemand(trace::TraceReader& reader);
// What `needs` (policy::TraceNeed bits) asks of a trace that it does not carry, with how to
// record it ("the gate inputs, which the trace does not carry (record it with --hidden
// f32)"); empty when it carries everything.
std::string MissingTraceInputs(const trace::TraceHeader& header, unsigned needs);
// "arch:size" (e.g. "olmoe:full"), a config.json, or a model directory.
ModelConfig LoadScaleTarget(const std::string& spec);

ReplayResult Replay(trace::TraceReader& reader, const ReplayOptions& options,
                    const policy::FutureDemand* future = nullptr);

}  // namespace moex::sim

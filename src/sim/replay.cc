#include "sim/replay.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "core/budget.h"
#include "core/error.h"
#include "io/expert_store_format.h"
#include "io/input_file.h"
#include "model/random_model.h"
#include "policy/registry.h"
#include "sim/cost_model.h"
#include "sim/layer_exchange.h"
#include "sim/link_model.h"
#include "tiers/cache_plan.h"
#include "tiers/host_tier.h"
#include "tiers/offload_metrics.h"
#include "tiers/policy_assembly.h"
#include "trace/routing_counts.h"
#include "trace/trace_events.h"

namespace moex::sim {

using tiers::CacheCommand;
using tiers::ExpertKey;

double ReplayResult::hit_rate() const {
  const int64_t n = total.hits + total.misses;
  return n ? static_cast<double>(total.hits) / static_cast<double>(n) : 0;
}
double ReplayResult::decode_hit_rate() const {
  const int64_t n = decode_hits + decode_misses;
  return n ? static_cast<double>(decode_hits) / static_cast<double>(n) : 0;
}
double ReplayResult::bytes_per_token() const {
  const int64_t n = prefill_tokens + decode_tokens;
  return n ? static_cast<double>(bytes_read) / static_cast<double>(n) : 0;
}
double ReplayResult::decode_bytes_per_token() const {
  return decode_tokens ? static_cast<double>(decode_bytes_read) / static_cast<double>(decode_tokens)
                       : 0;
}

nlohmann::json ReplayResult::ToJson() const {
  nlohmann::json j = tiers::CountersJson(total, page_bytes);
  j["policy"] = policy;
  j["policy_worker"] = worker;
  j["policy_cpu"] = tiers::PolicyTimingJson(policy_timing);
  j["predictions"] = predictions;
  if (!policy_report.is_null()) j["policy_report"] = policy_report;
  j["budget_bytes"] = budget_bytes;
  j["budget_fraction"] = budget_fraction;
  j["capacity_experts"] = capacity_experts;
  j["expert_bytes"] = expert_bytes;
  j["hit_rate"] = hit_rate();
  j["decode_hit_rate"] = decode_hit_rate();
  j["decode_hits"] = decode_hits;
  j["decode_misses"] = decode_misses;
  j["requests"] = requests;
  j["iterations"] = iterations;
  j["prefill_tokens"] = prefill_tokens;
  j["decode_tokens"] = decode_tokens;
  j["bytes_read"] = bytes_read;
  j["demand_bytes_read"] = demand_bytes;
  j["released_in_flight_bytes"] = released_in_flight_bytes;
  j["bytes_per_token"] = bytes_per_token();
  j["decode_bytes_per_token"] = decode_bytes_per_token();
  if (timed) {
    j["modelled"] = {
        {"total_ms", total_ms},
        {"ttft_ms", ttft_ms},
        {"tpot_ms", tpot_ms},
        {"decode_tokens_per_s", tpot_ms > 0 ? 1e3 / tpot_ms : 0},
        {"stall_ms", stall_ms},
        {"decode_stall_ms_per_token",
         decode_tokens ? decode_stall_ms / static_cast<double>(decode_tokens) : 0},
        {"io_busy_ms", io_busy_ms},
        {"io_hidden_share", io_busy_ms > 0 ? std::max(0.0, 1 - stall_ms / io_busy_ms) : 1}};
  } else {
    j["modelled"] = nullptr;
  }
  nlohmann::json per_layer = nlohmann::json::array();
  for (size_t l = 0; l < layers.size(); ++l) {
    const tiers::LayerCounters& c = layers[l];
    if (c.hits + c.misses + c.prefetch_issued == 0) continue;
    nlohmann::json lj = tiers::CountersJson(c, page_bytes);
    lj["layer"] = l;
    per_layer.push_back(lj);
  }
  j["layers"] = per_layer;
  if (expert_parallel) {
    const ExpertParallelResult& x = *expert_parallel;
    const int64_t tokens = prefill_tokens + decode_tokens;
    auto per = [](double v, int64_t n) { return n ? v / static_cast<double>(n) : 0; };
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankReplay& r : x.per_rank) ranks.push_back(r.ToJson(page_bytes));
    j["expert_parallel"] = {{"ranks", x.ranks},
                            {"network", x.network},
                            {"network_gb_per_s", x.network_gb_per_s},
                            {"network_latency_us", x.network_latency_us},
                            {"input_rows", x.input_rows},
                            {"output_rows", x.output_rows},
                            {"network_bytes_sent", x.bytes_sent},
                            {"network_bytes_received", x.bytes_received},
                            {"network_bytes_per_token",
                             per(static_cast<double>(x.bytes_sent + x.bytes_received), tokens)},
                            {"decode_network_bytes_per_token",
                             per(static_cast<double>(x.decode_network_bytes), decode_tokens)},
                            {"time_ms",
                             {{"rank0_other", x.rank0_other_ms},
                              {"expert_compute", x.expert_compute_ms},
                              {"storage_stall", x.expert_stall_ms},
                              {"network", x.network_ms}}},
                            {"decode_time_ms_per_token",
                             {{"rank0_other", per(x.decode_rank0_other_ms, decode_tokens)},
                              {"expert_compute", per(x.decode_expert_compute_ms, decode_tokens)},
                              {"storage_stall", per(decode_stall_ms, decode_tokens)},
                              {"network", per(x.decode_network_ms, decode_tokens)}}},
                            {"per_rank", ranks},
                            {"placement", x.placement}};
  }
  return j;
}

nlohmann::json RankReplay::ToJson(int64_t page_bytes) const {
  nlohmann::json j = tiers::CountersJson(total, page_bytes);
  j["rank"] = rank;
  j["experts"] = experts;
  j["budget_bytes"] = budget_bytes;
  j["capacity_experts"] = capacity_experts;
  j["bytes_read"] = bytes_read;
  j["network_bytes_in"] = network_bytes_in;
  j["network_bytes_out"] = network_bytes_out;
  j["expert_compute_ms"] = expert_compute_ms;
  j["stall_ms"] = stall_ms;
  j["io_busy_ms"] = io_busy_ms;
  return j;
}

ModelConfig TraceConfig(const trace::TraceHeader& h) {
  if (!h.model.config.is_null()) return ModelConfig::FromHfJson(h.model.config);
  // An imported log: only what the policies need (layers, experts, top-k, widths).
  const trace::TraceModel& m = h.model;
  ModelConfig c;
  c.arch = Arch::kMixtral;
  c.hidden_size = m.hidden_size;
  c.num_layers = m.num_layers;
  c.num_experts = m.num_experts;
  c.num_experts_per_tok = m.top_k;
  c.moe_intermediate_size = m.expert_neurons;
  c.first_k_dense_replace = m.moe_layers.front();
  for (int l = 0; l < m.num_layers; ++l)
    Check(c.IsMoeLayer(l) == std::binary_search(m.moe_layers.begin(), m.moe_layers.end(), l),
          "trace ", m.name, ": its MoE layers are not a contiguous tail of its layers");
  return c;
}

policy::FutureDemand ReadFutureDemand(trace::TraceReader& reader) {
  policy::FutureDemand future;
  reader.Rewind();
  trace::TraceEvent e;
  while (reader.Next(&e)) {
    if (e.kind != trace::TraceEvent::kIteration) continue;
    for (const trace::TraceGate& g : e.iteration.gates) {
      std::set<int32_t> ids(g.ids.begin(), g.ids.end());
      std::vector<ExpertKey>& keys = future.gates.emplace_back();
      for (int32_t id : ids) keys.push_back({g.layer, id});
    }
  }
  reader.Rewind();
  return future;
}

ModelConfig LoadScaleTarget(const std::string& spec) {
  namespace fs = std::filesystem;
  fs::path path(spec);
  if (fs::is_directory(path)) path /= "config.json";
  if (RegularFileExists(path.string())) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(ReadInputFile(path.string(), kMaxConfigFileBytes));
    } catch (const nlohmann::json::exception& e) {
      Fail(path.string(), " is not valid JSON: ", e.what());
    }
    return ModelConfig::FromHfJson(j);
  }
  const size_t colon = spec.find(':');
  Check(colon != std::string::npos, "scale target '", spec,
        "' is neither a config.json, a model directory, nor ARCH:SIZE (e.g. olmoe:full)");
  return RandomModelConfig(ParseArch(spec.substr(0, colon)),
                           ParseModelSize(spec.substr(colon + 1)));
}

std::string MissingTraceInputs(const trace::TraceHeader& h, unsigned needs) {
  std::vector<std::string> what, flags;
  auto need = [&](unsigned bit, bool has, const char* name, const char* flag) {
    if (!(needs & bit) || has) return;
    what.push_back(name);
    if (std::find(flags.begin(), flags.end(), flag) == flags.end()) flags.push_back(flag);
  };
  need(policy::kNeedsRouterWeights, h.router_weights, "the router weights", "--hidden f32");
  need(policy::kNeedsHidden, h.hidden != trace::Precision::kNone, "the gate inputs",
       "--hidden f32");
  need(policy::kNeedsProbs, h.probs != trace::Precision::kNone, "the gate probabilities",
       "--probs f16");
  need(policy::kNeedsPooled, h.pooled, "the pooled prompt embeddings", "--pooled");
  if (what.empty()) return "";
  auto join = [](const std::vector<std::string>& items) {
    std::string text;
    for (size_t i = 0; i < items.size(); ++i)
      text += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
    return text;
  };
  return join(what) + ", which the trace does not carry (record it with " + join(flags) + ")";
}

namespace {

// The trace must carry what the policy reads (gate inputs, probabilities, embeddings).
void CheckTraceCarries(const trace::TraceReader& reader, const std::string& spec) {
  const std::string missing = MissingTraceInputs(reader.header(), policy::SpecTraceNeeds(spec));
  Check(missing.empty(), "trace ", reader.path(), ": policy ", spec, " needs ", missing);
}

// The costs a planning policy sees (MoEpic's configurator): one decode token's pieces on
// the profile, with attention read over 256 cached positions (the evaluation's prompts are
// cut at 256 tokens), and one whole expert over the link chunk by chunk.
policy::StepCosts StepCostsOf(const HardwareProfile& hw, const ModelConfig& config,
                              const tiers::ExpertGeometry& g, int chunks) {
  if (hw.link_gb_per_s <= 0) return {};
  const CostModel cost(hw, config, 2.0, hw.cache_tier == "device" ? 2.0 : 4.0);
  int first_moe = 0;
  while (first_moe < config.num_layers && !config.IsMoeLayer(first_moe)) ++first_moe;
  policy::StepCosts c;
  c.attention_ms = cost.AttentionMs(1, 256) + cost.LayerOverheadMs() +
                   (first_moe < config.num_layers ? cost.DenseFfnMs(first_moe, 1) : 0);
  c.expert_ms = cost.ExpertOverheadMs() + cost.ExpertMs(1, g.neurons);
  c.head_ms = cost.HeadMs(1);
  c.load_expert_ms = chunks * hw.link_latency_us / 1e3 +
                     static_cast<double>(g.record_bytes) * g.neurons / (hw.link_gb_per_s * 1e6);
  return c;
}

// Per request: when it started and when its tokens came out, in simulated time.
struct RequestClock {
  int64_t prompt_len = 0;
  int64_t positions = 0;  // Tokens already in its KV cache.
  double start_ms = -1;
  double first_token_ms = -1;
  double last_ms = 0;
  int64_t decode_passes = 0;
};

// One host's tier stack: its cache, its policy instance, its storage link and the clock
// they read. With one rank it is the whole simulation's; with several, rank r's sees only
// the gates of its own experts.
struct RankStack {
  tiers::CacheGeometry geometry;
  policy::PolicyFacts facts;
  policy::FutureDemand future;  // Its own gates (ranks > 1).
  std::unique_ptr<tiers::OffloadController> controller;
  std::unique_ptr<LinkModel> link;
  int32_t next_staging_page = 0;
  std::vector<char> owned;        // [layer * num_experts + expert]; empty: owns every expert.
  std::vector<int32_t> routed;    // Its share of a gate's routed set.
  const double* clock = nullptr;  // What its link, probe and worker read as "now".
  double phase_ms = 0;            // Its clock during a layer's expert phase (ranks > 1).
  RankReplay out;

  bool Owns(const ExpertKey& k, int num_experts) const {
    return owned.empty() || owned[static_cast<size_t>(k.layer) * static_cast<size_t>(num_experts) +
                                  static_cast<size_t>(k.expert)] != 0;
  }
};

class Simulation {
 public:
  Simulation(trace::TraceReader& reader, const ReplayOptions& o, const policy::FutureDemand* future)
      : reader_(reader), header_(reader.header()), hardware_(o.hardware) {
    const trace::TraceModel& m = header_.model;
    policy_config_ = TraceConfig(header_);
    Check(o.ranks >= 1, "the number of ranks must be at least 1, not ", o.ranks);
    const int n_ranks = o.ranks;

    // Expert geometry: the trace's, or the scale target's experts on the trace's layers.
    tiers::ExpertGeometry g;
    g.num_layers = m.num_layers;
    g.num_moe_layers = static_cast<int>(m.moe_layers.size());
    g.num_experts = m.num_experts;
    g.neurons = m.expert_neurons;
    g.record_bytes = m.record_bytes;
    g.block_neurons = m.block_neurons;
    std::optional<ModelConfig> cost_config;
    if (!m.config.is_null()) cost_config = policy_config_;
    if (o.scale_to) {
      const ModelConfig& s = *o.scale_to;
      Check(s.num_experts == m.num_experts, "cannot scale a trace of ", m.num_experts,
            " experts per layer to a model with ", s.num_experts);
      Check(s.num_layers >= m.num_layers, "cannot scale a trace of ", m.num_layers,
            " layers to a model with ", s.num_layers);
      for (int l : m.moe_layers)
        Check(s.IsMoeLayer(l), "layer ", l, " of the trace is not a MoE layer of the scale target");
      g.neurons = s.moe_intermediate_size;
      g.record_bytes = 3 * static_cast<int64_t>(s.hidden_size) * 2;  // Published checkpoints: BF16.
      g.block_neurons = static_cast<int>(StoreBlockNeurons(static_cast<uint64_t>(g.record_bytes),
                                                           static_cast<uint32_t>(g.neurons)));
      cost_config = s;
    }
    if (o.placement) {
      o.placement->Validate(m.num_layers, m.moe_layers, m.num_experts, n_ranks);
      placement_ = *o.placement;
    }
    if (n_ranks > 1) {
      Check(o.hardware.network_gb_per_s > 0, "expert parallelism over ", n_ranks,
            " ranks needs a network link: choose one with --network (moex sim --list-network) "
            "or give the hardware profile network_gb_per_s");
      if (!o.placement)
        placement_ = dist::ExpertPlacement::Balanced(m.num_layers, m.moe_layers, m.num_experts,
                                                     n_ranks, trace::RoutedTokenCounts(reader));
      // f32 rows of the model the experts are costed as.
      row_bytes_ = 4 * static_cast<int64_t>(cost_config ? cost_config->hidden_size : m.hidden_size);
    }
    const int64_t full =
        tiers::FullFootprint(g, o.chunk_neurons > 0 ? o.chunk_neurons : tiers::AutoChunkNeurons(g));
    const int64_t all_experts = static_cast<int64_t>(m.moe_layers.size()) * m.num_experts;
    result_.expert_bytes = g.record_bytes * g.neurons;
    record_bytes_ = g.record_bytes;
    CheckTraceCarries(reader, o.policy.spec);

    for (int r = 0; r < n_ranks; ++r) {
      auto rs = std::make_unique<RankStack>();
      RankStack* s = rs.get();
      s->clock = &t_;
      s->out.rank = r;
      s->out.experts = all_experts;
      int64_t rank_full = full;
      if (n_ranks > 1) {
        s->owned.assign(static_cast<size_t>(m.num_layers) * static_cast<size_t>(m.num_experts), 0);
        s->out.experts = placement_.ExpertCount(r);
        for (int l : m.moe_layers)
          for (int e : placement_.ExpertsOf(l, r))
            s->owned[static_cast<size_t>(l) * static_cast<size_t>(m.num_experts) +
                     static_cast<size_t>(e)] = 1;
        // A share budget is of the rank's own experts' footprint (every expert's is equal).
        rank_full = full / all_experts * s->out.experts;
        if (future) {
          for (const std::vector<ExpertKey>& gate : future->gates) {
            std::vector<ExpertKey> mine;
            for (const ExpertKey& k : gate)
              if (s->Owns(k, m.num_experts)) mine.push_back(k);
            if (!mine.empty()) s->future.gates.push_back(std::move(mine));
          }
        }
      }
      s->out.budget_bytes = ParseBudget(o.budget, rank_full);
      s->geometry = tiers::PlanCache(g, o.chunk_neurons, s->out.budget_bytes);
      tiers::AssembledController assembled = tiers::AssembleController(
          o.policy, policy_config_, s->geometry, result_.expert_bytes,
          reader.tensors().empty() ? nullptr : &reader.tensors(),
          [&](policy::PolicyFacts& facts, policy::PolicyWorker& worker) {
            worker.set_clock([s] { return *s->clock * 1e3; });
            facts.future = n_ranks > 1 && future ? &s->future : future;
            if (cost_config)
              facts.step_costs =
                  StepCostsOf(o.hardware, *cost_config, g, s->geometry.chunks_per_expert());
          });
      s->controller = std::move(assembled.controller);
      s->facts = std::move(assembled.facts);
      s->controller->set_landed_probe([this, s](const ExpertKey& k) { return Landed(*s, k); });
      if (n_ranks > 1)
        s->controller->set_owner(
            [s, n = m.num_experts](const ExpertKey& k) { return s->Owns(k, n); });
      s->out.capacity_experts = s->facts.capacity_experts;
      s->next_staging_page = static_cast<int32_t>(s->geometry.capacity_pages);
      s->link = std::make_unique<LinkModel>(o.hardware.link_gb_per_s, o.hardware.link_latency_us,
                                            o.hardware.link_in_flight);
      ranks_.push_back(std::move(rs));
    }
    const RankStack& first = *ranks_.front();
    for (const auto& rs : ranks_) {
      result_.budget_bytes += rs->out.budget_bytes;
      result_.capacity_experts += rs->out.capacity_experts;
    }
    result_.budget_fraction = static_cast<double>(result_.budget_bytes) / static_cast<double>(full);
    on_finish_ = o.on_finish;
    result_.policy = first.controller->policy().name();
    result_.worker = policy::PolicyWorker::ModeName(o.policy.worker);
    result_.page_bytes = first.geometry.page_bytes;
    chunks_per_expert_ = first.geometry.chunks_per_expert();
    geometry_ = first.geometry;

    if (cost_config) {
      cost_.emplace(o.hardware, *cost_config, 2.0, o.hardware.cache_tier == "device" ? 2.0 : 4.0);
      whole_model_ = cost_config->num_layers == m.num_layers;
      result_.timed = true;
    }
    if (n_ranks > 1) {
      ExpertParallelResult& x = result_.expert_parallel.emplace();
      x.ranks = n_ranks;
      x.network = o.hardware.network;
      x.network_gb_per_s = o.hardware.network_gb_per_s;
      x.network_latency_us = o.hardware.network_latency_us;
      x.placement = placement_.ToJson();
    }
  }

  ReplayResult Run() {
    reader_.Rewind();
    trace::TraceEvent e;
    double ttft_sum = 0, tpot_sum = 0;
    int64_t ttft_n = 0, tpot_n = 0;
    while (reader_.Next(&e)) {
      switch (e.kind) {
        case trace::TraceEvent::kRequestBegin: {
          RequestClock& r = requests_[e.request];
          r.prompt_len = static_cast<int64_t>(e.prompt.size());
          ++result_.requests;
          for (auto& rs : ranks_) {
            rs->controller->RequestBegin(trace::RequestBeginEventOf(e), &commands_);
            Apply(*rs);
          }
          break;
        }
        case trace::TraceEvent::kIteration:
          Iteration(e.iteration);
          break;
        case trace::TraceEvent::kRequestEnd: {
          for (auto& rs : ranks_) {
            rs->controller->RequestEnd({e.request}, &commands_);
            Apply(*rs);
          }
          auto it = requests_.find(e.request);
          if (it == requests_.end()) break;
          const RequestClock& r = it->second;
          if (r.first_token_ms >= 0) {
            ttft_sum += r.first_token_ms - r.start_ms;
            ++ttft_n;
          }
          if (r.decode_passes > 0) {
            tpot_sum += (r.last_ms - r.first_token_ms) / static_cast<double>(r.decode_passes);
            ++tpot_n;
          }
          requests_.erase(it);
          break;
        }
      }
    }
    // Like the engine, count reads that completed, not queued ones.
    for (auto& rs : ranks_) rs->link->AdvanceTo(t_);
    const RankStack& first = *ranks_.front();
    if (ranks_.size() == 1 && on_finish_) on_finish_(first.controller->policy(), first.facts);
    result_.layers = first.controller->Counters();
    result_.policy_timing = first.controller->Timing();
    for (size_t r = 1; r < ranks_.size(); ++r) {
      const std::vector<tiers::LayerCounters> counters = ranks_[r]->controller->Counters();
      for (size_t l = 0; l < counters.size(); ++l) result_.layers[l].Add(counters[l]);
      const tiers::PolicyTiming t = ranks_[r]->controller->Timing();
      result_.policy_timing.hook_us += t.hook_us;
      result_.policy_timing.worker_us += t.worker_us;
      result_.policy_timing.worker_jobs += t.worker_jobs;
      result_.policy_timing.budget_refused += t.budget_refused;
      result_.policy_timing.evict_us += t.evict_us;
    }
    result_.predictions = first.controller->predictions().ToJson();
    first.controller->policy().ReportJson(&result_.policy_report);
    for (const tiers::LayerCounters& c : result_.layers) result_.total.Add(c);
    for (auto& rs : ranks_) {
      result_.bytes_read += rs->link->bytes_moved();
      result_.demand_bytes += rs->link->demand_bytes();
      result_.released_in_flight_bytes += rs->link->orphan_bytes();
      result_.io_busy_ms += rs->link->busy_ms();
    }
    result_.total_ms = t_;
    result_.stall_ms = stall_ms_;
    result_.ttft_ms = ttft_n ? ttft_sum / static_cast<double>(ttft_n) : 0;
    result_.tpot_ms = tpot_n ? tpot_sum / static_cast<double>(tpot_n) : 0;
    if (result_.expert_parallel) {
      ExpertParallelResult& x = *result_.expert_parallel;
      x.rank0_other_ms = other_ms_;
      x.expert_compute_ms = expert_compute_ms_;
      x.expert_stall_ms = stall_ms_;
      for (auto& rs : ranks_) {
        RankReplay& out = rs->out;
        for (const tiers::LayerCounters& c : rs->controller->Counters()) out.total.Add(c);
        out.bytes_read = rs->link->bytes_moved();
        out.io_busy_ms = rs->link->busy_ms();
        x.per_rank.push_back(out);
      }
    }
    if (!result_.timed) {
      result_.total_ms = result_.stall_ms = result_.decode_stall_ms = result_.io_busy_ms = 0;
      if (result_.expert_parallel) {
        ExpertParallelResult& x = *result_.expert_parallel;
        x.network_ms = x.decode_network_ms = x.rank0_other_ms = x.expert_compute_ms =
            x.expert_stall_ms = x.decode_rank0_other_ms = x.decode_expert_compute_ms = 0;
        for (RankReplay& r : x.per_rank) r.expert_compute_ms = r.stall_ms = r.io_busy_ms = 0;
      }
    }
    return result_;
  }

 private:
  void Apply(RankStack& rs) {
    const double now = *rs.clock;
    const int num_experts = header_.model.num_experts;
    for (const CacheCommand& c : commands_) {
      switch (c.kind) {
        case CacheCommand::kFetch:
          // The controller drops prefetches of other ranks' experts (set_owner).
          Check(rs.Owns(c.expert, num_experts), "rank ", rs.out.rank, " was asked to read expert ",
                c.expert.expert, " of layer ", c.expert.layer, ", which another rank holds");
          rs.link->Enqueue(c.expert, c.page, c.generation, ChunkBytes(c.chunk), c.demand,
                           c.priority, now);
          break;
        case CacheCommand::kRelease:
          rs.link->Release(c.page, now);
          break;
        case CacheCommand::kPromote:
          rs.link->Promote(c.expert, now);
          break;
        case CacheCommand::kReprioritize:
          rs.link->Reprioritize(c.expert, c.priority, now);
          break;
      }
    }
    commands_.clear();
  }

  // Every present chunk of the expert has landed by now.
  bool Landed(RankStack& rs, const ExpertKey& key) {
    rs.link->AdvanceTo(*rs.clock);
    const tiers::ExpertCache& cache = rs.controller->cache();
    for (int c = 0; c < chunks_per_expert_; ++c) {
      const int32_t page = cache.PageOf(key, c);
      if (page >= 0 && !rs.link->Landed(page, cache.Generation(page))) return false;
    }
    return true;
  }

  int64_t ChunkBytes(int chunk) const {
    return static_cast<int64_t>(geometry_.ChunkNeurons(chunk)) * record_bytes_;
  }

  int64_t StorageBytes() const {
    int64_t bytes = 0;
    for (const auto& rs : ranks_) bytes += rs->link->bytes_moved();
    return bytes;
  }

  void Iteration(const trace::TraceIteration& it) {
    const double start = t_;
    const int64_t n_tokens = static_cast<int64_t>(it.tokens.size());
    bool decode_only = true;
    int64_t kv_positions = 0;
    for (size_t i = 0; i < it.requests.size(); ++i) {
      RequestClock& r = requests_[it.requests[i]];
      if (r.start_ms < 0) r.start_ms = start;
      const int64_t n = it.token_counts[i], p = r.positions;
      kv_positions += n * p + n * (n + 1) / 2;
      if (p < r.prompt_len) decode_only = false;
    }
    ++result_.iterations;

    for (auto& rs : ranks_) {
      rs->controller->IterationBegin(trace::IterationBeginEventOf(it, header_), &commands_);
      Apply(*rs);
    }

    const int64_t bytes_before = StorageBytes();
    const double stall_before = stall_ms_;
    const tiers::LayerCounters before = Totals();
    const int64_t network_bytes_before = NetworkBytes();
    const double network_ms_before = network_ms_;
    const double other_before = other_ms_, compute_before = expert_compute_ms_;
    size_t next_gate = 0;
    for (int layer = 0; layer < header_.model.num_layers; ++layer) {
      if (cost_) {
        const double ms = cost_->AttentionMs(n_tokens, kv_positions) + cost_->LayerOverheadMs();
        t_ += ms;
        other_ms_ += ms;
      }
      if (next_gate < it.gates.size() && it.gates[next_gate].layer == layer) {
        const trace::TraceGate& g = it.gates[next_gate++];
        if (ranks_.size() == 1) {
          Gate(*ranks_.front(), trace::GateEventOf(g, header_, &routed_), g, t_, stall_ms_);
        } else {
          ParallelGate(g);
        }
      }
      if (cost_) {
        const double ms = cost_->DenseFfnMs(layer, n_tokens);
        t_ += ms;
        other_ms_ += ms;
      }
    }
    Check(next_gate == it.gates.size(), reader_.path(), ": iteration ", it.iteration,
          " has gates out of layer order");
    if (cost_ && whole_model_) {
      const double ms = cost_->HeadMs(static_cast<int64_t>(it.requests.size()));
      t_ += ms;
      other_ms_ += ms;
    }
    for (auto& rs : ranks_) {
      rs->controller->IterationEnd(&commands_);
      Apply(*rs);
    }

    // Token accounting: a request's first token comes out of the pass that ends its prompt.
    for (size_t i = 0; i < it.requests.size(); ++i) {
      RequestClock& r = requests_[it.requests[i]];
      const int64_t n = it.token_counts[i];
      if (r.positions >= r.prompt_len) {
        ++r.decode_passes;
        result_.decode_tokens += n;
      } else {
        result_.prefill_tokens += n;
      }
      r.positions += n;
      if (r.first_token_ms < 0 && r.positions >= r.prompt_len) r.first_token_ms = t_;
      r.last_ms = t_;
    }
    if (decode_only) {
      const tiers::LayerCounters after = Totals();
      result_.decode_hits += after.hits - before.hits;
      result_.decode_misses += after.misses - before.misses;
      // Reads landing during a decode pass (prefetches issued earlier included).
      for (auto& rs : ranks_) rs->link->AdvanceTo(t_);
      result_.decode_bytes_read += StorageBytes() - bytes_before;
      result_.decode_stall_ms += stall_ms_ - stall_before;
      if (result_.expert_parallel) {
        result_.expert_parallel->decode_network_bytes += NetworkBytes() - network_bytes_before;
        result_.expert_parallel->decode_network_ms += network_ms_ - network_ms_before;
        result_.expert_parallel->decode_rank0_other_ms += other_ms_ - other_before;
        result_.expert_parallel->decode_expert_compute_ms += expert_compute_ms_ - compute_before;
      }
    }
  }

  int64_t NetworkBytes() const {
    if (!result_.expert_parallel) return 0;
    return result_.expert_parallel->bytes_sent + result_.expert_parallel->bytes_received;
  }

  tiers::LayerCounters Totals() const {
    tiers::LayerCounters t;
    for (const auto& rs : ranks_)
      for (const tiers::LayerCounters& c : rs->controller->Counters()) t.Add(c);
    return t;
  }

  // One MoE layer over several ranks (layout A): rank 0 scatters the input rows, every rank
  // with routed experts runs its expert phase on its own stack and clock from when the rows
  // arrived, rank 0 gathers the output rows once the slowest rank is done.
  void ParallelGate(const trace::TraceGate& g) {
    const LayerExchange x = ExchangeOf(g.ids, g.n_tokens, g.top_k, g.layer, placement_, row_bytes_,
                                       hardware_.network_gb_per_s, hardware_.network_latency_us);
    ExpertParallelResult& ep = *result_.expert_parallel;
    ep.input_rows += x.input_rows;
    ep.output_rows += x.output_rows;
    ep.bytes_sent += x.bytes_sent;
    ep.bytes_received += x.bytes_received;
    const double scatter = cost_ ? x.scatter_ms : 0, gather = cost_ ? x.gather_ms : 0;
    network_ms_ += scatter + gather;
    ep.network_ms = network_ms_;

    const policy::GateEvent full = trace::GateEventOf(g, header_, &routed_);
    const double start = t_ + scatter;
    double end = start, slowest_stall = 0;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      RankStack& rs = *ranks_[r];
      rs.out.network_bytes_in += x.bytes_to[r];
      rs.out.network_bytes_out += x.bytes_from[r];
      rs.routed.clear();
      for (int32_t id : routed_)
        if (rs.Owns({g.layer, id}, header_.model.num_experts)) rs.routed.push_back(id);
      if (rs.routed.empty()) continue;  // No gate event: none of its experts was routed.
      policy::GateEvent e = full;
      e.routed = rs.routed.data();
      e.n_routed = static_cast<int64_t>(rs.routed.size());
      rs.phase_ms = start;
      rs.clock = &rs.phase_ms;
      double stall = 0;
      Gate(rs, e, g, rs.phase_ms, stall);
      rs.clock = &t_;
      rs.out.stall_ms += stall;
      if (rs.phase_ms > end) {
        end = rs.phase_ms;
        slowest_stall = stall;
      }
    }
    stall_ms_ += slowest_stall;
    expert_compute_ms_ += end - start - slowest_stall;
    t_ = end + gather;
  }

  // One rank's share of a MoE layer: demand and policy decisions, then its experts computed
  // chunk by chunk, each chunk as soon as it has landed, resident ones first (the executor's
  // order). `t` is the rank's clock, `stall` where its waits add up.
  void Gate(RankStack& rs, const policy::GateEvent& e, const trace::TraceGate& g, double& t,
            double& stall) {
    const std::vector<tiers::PlannedExpert> plan = rs.controller->Gate(e, &commands_);
    Apply(rs);

    std::map<int32_t, int64_t> tokens_of;
    for (int32_t id : g.ids) ++tokens_of[id];
    struct Pending {
      ExpertKey key;
      int64_t tokens;
      int next_chunk = 0;
      std::vector<std::pair<int32_t, uint32_t>> pages;  // Per chunk: page and generation.
    };
    std::vector<Pending> pending;
    const tiers::ExpertCache& cache = rs.controller->cache();
    for (const tiers::PlannedExpert& p : plan) {
      Pending x{p.key, tokens_of[p.key.expert], 0, {}};
      for (int c = 0; c < chunks_per_expert_; ++c) {
        int32_t page = cache.PageOf(p.key, c);
        uint32_t generation = 0;
        if (page >= 0) {
          generation = cache.Generation(page);
        } else {  // Streamed past a full cache through a staging page, as demand.
          page = rs.next_staging_page++;  // Never reused, so no landing is mistaken for another.
          generation = 1;
          rs.link->Enqueue(p.key, page, generation, ChunkBytes(c), true, 0, t);
        }
        x.pages.emplace_back(page, generation);
      }
      pending.push_back(std::move(x));
    }

    while (!pending.empty()) {
      rs.link->AdvanceTo(t);
      auto ready = std::find_if(pending.begin(), pending.end(), [&](const Pending& x) {
        const auto& [page, generation] = x.pages[static_cast<size_t>(x.next_chunk)];
        return rs.link->Landed(page, generation);
      });
      if (ready == pending.end()) {
        const double landing = rs.link->NextCompletion();
        Check(landing < std::numeric_limits<double>::infinity(), "simulator: layer ", g.layer,
              " waits for a chunk nothing is fetching");
        stall += landing - t;
        t = landing;
        continue;
      }
      if (cost_) {
        if (ready->next_chunk == 0) {
          const double ms = cost_->ExpertOverheadMs();
          t += ms;
          rs.out.expert_compute_ms += ms;
        }
        const double ms = cost_->ExpertMs(ready->tokens, geometry_.ChunkNeurons(ready->next_chunk));
        t += ms;
        rs.out.expert_compute_ms += ms;
      }
      if (++ready->next_chunk == chunks_per_expert_) {
        const ExpertKey key = ready->key;
        pending.erase(ready);
        rs.controller->ExpertDone({key.layer, key.expert}, &commands_);
        Apply(rs);
      }
    }
  }

  trace::TraceReader& reader_;
  const trace::TraceHeader& header_;
  HardwareProfile hardware_;
  ModelConfig policy_config_;
  tiers::CacheGeometry geometry_;  // Rank 0's; chunking is the same on every rank.
  int chunks_per_expert_ = 1;
  dist::ExpertPlacement placement_;
  int64_t row_bytes_ = 0;        // One f32 hidden row on the network.
  std::vector<int32_t> routed_;  // The gate event's routed set.
  std::function<void(const policy::Policy&, const policy::PolicyFacts&)> on_finish_;
  int64_t record_bytes_ = 0;
  std::vector<std::unique_ptr<RankStack>> ranks_;
  std::optional<CostModel> cost_;
  bool whole_model_ = false;
  std::vector<CacheCommand> commands_;
  std::map<int64_t, RequestClock> requests_;
  double t_ = 0;
  double stall_ms_ = 0;           // Waits on storage on the critical path.
  double other_ms_ = 0;           // Rank 0's work outside the expert phases.
  double expert_compute_ms_ = 0;  // Expert phases' compute on the critical path.
  double network_ms_ = 0;
  ReplayResult result_;
};

}  // namespace

ReplayResult Replay(trace::TraceReader& reader, const ReplayOptions& options,
                    const policy::FutureDemand* future) {
  Simulation sim(reader, options, future);
  return sim.Run();
}

}  // namespace moex::sim

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
#include "sim/link_model.h"
#include "tiers/cache_plan.h"
#include "tiers/host_tier.h"
#include "tiers/offload_metrics.h"
#include "tiers/policy_assembly.h"
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

class Simulation {
 public:
  Simulation(trace::TraceReader& reader, const ReplayOptions& o, const policy::FutureDemand* future)
      : reader_(reader), header_(reader.header()) {
    const trace::TraceModel& m = header_.model;
    policy_config_ = TraceConfig(header_);

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
    const int64_t full =
        tiers::FullFootprint(g, o.chunk_neurons > 0 ? o.chunk_neurons : tiers::AutoChunkNeurons(g));
    result_.budget_bytes = ParseBudget(o.budget, full);
    result_.budget_fraction = static_cast<double>(result_.budget_bytes) / static_cast<double>(full);
    geometry_ = tiers::PlanCache(g, o.chunk_neurons, result_.budget_bytes);
    result_.expert_bytes = g.record_bytes * g.neurons;
    record_bytes_ = g.record_bytes;

    CheckTraceCarries(reader, o.policy.spec);
    tiers::AssembledController assembled =
        tiers::AssembleController(o.policy, policy_config_, geometry_, result_.expert_bytes,
                                  reader.tensors().empty() ? nullptr : &reader.tensors(),
                                  [&](policy::PolicyFacts& facts, policy::PolicyWorker& worker) {
                                    worker.set_clock([this] { return t_ * 1e3; });
                                    facts.future = future;
                                    if (cost_config)
                                      facts.step_costs = StepCostsOf(o.hardware, *cost_config, g,
                                                                     geometry_.chunks_per_expert());
                                  });
    controller_ = std::move(assembled.controller);
    facts_ = std::move(assembled.facts);
    controller_->set_landed_probe([this](const ExpertKey& k) { return Landed(k); });
    on_finish_ = o.on_finish;
    result_.policy = controller_->policy().name();
    result_.worker = policy::PolicyWorker::ModeName(o.policy.worker);
    result_.capacity_experts = facts_.capacity_experts;
    result_.page_bytes = geometry_.page_bytes;

    next_staging_page_ = static_cast<int32_t>(geometry_.capacity_pages);
    link_ = std::make_unique<LinkModel>(o.hardware.link_gb_per_s, o.hardware.link_latency_us,
                                        o.hardware.link_in_flight);
    if (cost_config) {
      cost_.emplace(o.hardware, *cost_config, 2.0, o.hardware.cache_tier == "device" ? 2.0 : 4.0);
      whole_model_ = cost_config->num_layers == m.num_layers;
      result_.timed = true;
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
          controller_->RequestBegin(trace::RequestBeginEventOf(e), &commands_);
          Apply();
          break;
        }
        case trace::TraceEvent::kIteration:
          Iteration(e.iteration);
          break;
        case trace::TraceEvent::kRequestEnd: {
          controller_->RequestEnd({e.request}, &commands_);
          Apply();
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
    link_->AdvanceTo(t_);  // Like the engine, count reads that completed, not queued ones.
    if (on_finish_) on_finish_(controller_->policy(), facts_);
    result_.layers = controller_->Counters();
    result_.policy_timing = controller_->Timing();
    result_.predictions = controller_->predictions().ToJson();
    controller_->policy().ReportJson(&result_.policy_report);
    for (const tiers::LayerCounters& c : result_.layers) result_.total.Add(c);
    result_.bytes_read = link_->bytes_moved();
    result_.demand_bytes = link_->demand_bytes();
    result_.released_in_flight_bytes = link_->orphan_bytes();
    result_.total_ms = t_;
    result_.stall_ms = stall_ms_;
    result_.io_busy_ms = link_->busy_ms();
    result_.ttft_ms = ttft_n ? ttft_sum / static_cast<double>(ttft_n) : 0;
    result_.tpot_ms = tpot_n ? tpot_sum / static_cast<double>(tpot_n) : 0;
    if (!result_.timed)
      result_.total_ms = result_.stall_ms = result_.decode_stall_ms = result_.io_busy_ms = 0;
    return result_;
  }

 private:
  void Apply() {
    for (const CacheCommand& c : commands_) {
      switch (c.kind) {
        case CacheCommand::kFetch:
          link_->Enqueue(c.expert, c.page, c.generation, ChunkBytes(c.chunk), c.demand, c.priority,
                         t_);
          break;
        case CacheCommand::kRelease:
          link_->Release(c.page, t_);
          break;
        case CacheCommand::kPromote:
          link_->Promote(c.expert, t_);
          break;
        case CacheCommand::kReprioritize:
          link_->Reprioritize(c.expert, c.priority, t_);
          break;
      }
    }
    commands_.clear();
  }

  // Every present chunk of the expert has landed by now.
  bool Landed(const ExpertKey& key) {
    link_->AdvanceTo(t_);
    const tiers::ExpertCache& cache = controller_->cache();
    for (int c = 0; c < geometry_.chunks_per_expert(); ++c) {
      const int32_t page = cache.PageOf(key, c);
      if (page >= 0 && !link_->Landed(page, cache.Generation(page))) return false;
    }
    return true;
  }

  int64_t ChunkBytes(int chunk) const {
    return static_cast<int64_t>(geometry_.ChunkNeurons(chunk)) * record_bytes_;
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

    controller_->IterationBegin(trace::IterationBeginEventOf(it, header_), &commands_);
    Apply();

    const int64_t bytes_before = link_->bytes_moved();
    const double stall_before = stall_ms_;
    const tiers::LayerCounters before = Totals();
    size_t next_gate = 0;
    for (int layer = 0; layer < header_.model.num_layers; ++layer) {
      if (cost_) t_ += cost_->AttentionMs(n_tokens, kv_positions) + cost_->LayerOverheadMs();
      if (next_gate < it.gates.size() && it.gates[next_gate].layer == layer) {
        Gate(it.gates[next_gate++]);
      }
      if (cost_) t_ += cost_->DenseFfnMs(layer, n_tokens);
    }
    Check(next_gate == it.gates.size(), reader_.path(), ": iteration ", it.iteration,
          " has gates out of layer order");
    if (cost_ && whole_model_) t_ += cost_->HeadMs(static_cast<int64_t>(it.requests.size()));
    controller_->IterationEnd(&commands_);
    Apply();

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
      link_->AdvanceTo(t_);
      result_.decode_bytes_read += link_->bytes_moved() - bytes_before;
      result_.decode_stall_ms += stall_ms_ - stall_before;
    }
  }

  tiers::LayerCounters Totals() const {
    tiers::LayerCounters t;
    for (const tiers::LayerCounters& c : controller_->Counters()) t.Add(c);
    return t;
  }

  // One MoE layer: demand and policy decisions, then the experts computed chunk by chunk,
  // each chunk as soon as it has landed, resident ones first (the executor's order).
  void Gate(const trace::TraceGate& g) {
    const std::vector<tiers::PlannedExpert> plan =
        controller_->Gate(trace::GateEventOf(g, header_, &routed_), &commands_);
    Apply();

    std::map<int32_t, int64_t> tokens_of;
    for (int32_t id : g.ids) ++tokens_of[id];
    struct Pending {
      ExpertKey key;
      int64_t tokens;
      int next_chunk = 0;
      std::vector<std::pair<int32_t, uint32_t>> pages;  // Per chunk: page and generation.
    };
    std::vector<Pending> pending;
    const tiers::ExpertCache& cache = controller_->cache();
    for (const tiers::PlannedExpert& p : plan) {
      Pending x{p.key, tokens_of[p.key.expert], 0, {}};
      for (int c = 0; c < geometry_.chunks_per_expert(); ++c) {
        int32_t page = cache.PageOf(p.key, c);
        uint32_t generation = 0;
        if (page >= 0) {
          generation = cache.Generation(page);
        } else {  // Streamed past a full cache through a staging page, as demand.
          page = next_staging_page_++;  // Never reused, so no landing is mistaken for another.
          generation = 1;
          link_->Enqueue(p.key, page, generation, ChunkBytes(c), true, 0, t_);
        }
        x.pages.emplace_back(page, generation);
      }
      pending.push_back(std::move(x));
    }

    while (!pending.empty()) {
      link_->AdvanceTo(t_);
      auto ready = std::find_if(pending.begin(), pending.end(), [&](const Pending& x) {
        const auto& [page, generation] = x.pages[static_cast<size_t>(x.next_chunk)];
        return link_->Landed(page, generation);
      });
      if (ready == pending.end()) {
        const double landing = link_->NextCompletion();
        Check(landing < std::numeric_limits<double>::infinity(), "simulator: layer ", g.layer,
              " waits for a chunk nothing is fetching");
        stall_ms_ += landing - t_;
        t_ = landing;
        continue;
      }
      if (cost_) {
        if (ready->next_chunk == 0) t_ += cost_->ExpertOverheadMs();
        t_ += cost_->ExpertMs(ready->tokens, geometry_.ChunkNeurons(ready->next_chunk));
      }
      if (++ready->next_chunk == geometry_.chunks_per_expert()) {
        const ExpertKey key = ready->key;
        pending.erase(ready);
        controller_->ExpertDone({key.layer, key.expert}, &commands_);
        Apply();
      }
    }
  }

  trace::TraceReader& reader_;
  const trace::TraceHeader& header_;
  ModelConfig policy_config_;
  tiers::CacheGeometry geometry_;
  policy::PolicyFacts facts_;
  std::vector<int32_t> routed_;  // The gate event's routed set.
  std::function<void(const policy::Policy&, const policy::PolicyFacts&)> on_finish_;
  int64_t record_bytes_ = 0;
  int32_t next_staging_page_ = 0;
  std::unique_ptr<tiers::OffloadController> controller_;
  std::unique_ptr<LinkModel> link_;
  std::optional<CostModel> cost_;
  bool whole_model_ = false;
  std::vector<CacheCommand> commands_;
  std::map<int64_t, RequestClock> requests_;
  double t_ = 0;
  double stall_ms_ = 0;
  ReplayResult result_;
};

}  // namespace

ReplayResult Replay(trace::TraceReader& reader, const ReplayOptions& options,
                    const policy::FutureDemand* future) {
  Simulation sim(reader, options, future);
  return sim.Run();
}

}  // namespace moex::sim

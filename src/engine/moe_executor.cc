#include "engine/moe_executor.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "core/budget.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/mutex.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "engine/layer_runner.h"
#include "kernels/ops.h"
#include "model/expert_store_packer.h"
#include "model/model_identity.h"
#include "model/store_location.h"
#include "policy/registry.h"

namespace moex {

void ExpertBatch::Build(const Routing& r, const float* x, int64_t d_model, bool weight_on_input) {
  d_ = d_model;
  weight_on_input_ = weight_on_input;
  const int E = r.num_experts;
  const int64_t slots = r.n_tokens * r.top_k;
  begin_.assign(static_cast<size_t>(E) + 1, 0);
  for (int64_t s = 0; s < slots; ++s)
    ++begin_[static_cast<size_t>(r.ids[static_cast<size_t>(s)]) + 1];
  active_.clear();
  for (int e = 0; e < E; ++e) {
    if (begin_[static_cast<size_t>(e) + 1] > 0) active_.push_back(e);
    begin_[static_cast<size_t>(e) + 1] += begin_[static_cast<size_t>(e)];
  }
  std::vector<int64_t> fill(begin_.begin(), begin_.end() - 1);
  row_of_slot_.resize(static_cast<size_t>(slots));
  x_.resize(static_cast<size_t>(slots * d_));
  y_.assign(static_cast<size_t>(slots * d_), 0.0f);
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t t = s / r.top_k;
    const int64_t row = fill[static_cast<size_t>(r.ids[static_cast<size_t>(s)])]++;
    row_of_slot_[static_cast<size_t>(s)] = row;
    float* xr = &x_[static_cast<size_t>(row * d_)];
    if (weight_on_input) {
      const float w = r.weights[static_cast<size_t>(s)];
      for (int64_t j = 0; j < d_; ++j) xr[j] = x[t * d_ + j] * w;
    } else {
      std::memcpy(xr, x + t * d_, sizeof(float) * d_);
    }
  }
}

int64_t ExpertBatch::tokens_of(int32_t e) const {
  return begin_[static_cast<size_t>(e) + 1] - begin_[static_cast<size_t>(e)];
}
const float* ExpertBatch::inputs_of(int32_t e) const {
  return &x_[static_cast<size_t>(begin_[static_cast<size_t>(e)] * d_)];
}
float* ExpertBatch::outputs_of(int32_t e) {
  return &y_[static_cast<size_t>(begin_[static_cast<size_t>(e)] * d_)];
}

void ExpertBatch::Combine(const Routing& r, float* out, const float* down_bias,
                          const float* down_scale) const {
  for (int64_t t = 0; t < r.n_tokens; ++t) {
    float* o = out + t * d_;
    for (int k = 0; k < r.top_k; ++k) {
      const size_t s = static_cast<size_t>(t * r.top_k + k);
      const float w = weight_on_input_ ? 1.0f : r.weights[s];
      const float* y = &y_[static_cast<size_t>(row_of_slot_[s] * d_)];
      if (down_scale != nullptr) {
        const float scale = down_scale[r.ids[s]];
        const float* b =
            down_bias != nullptr ? down_bias + static_cast<int64_t>(r.ids[s]) * d_ : nullptr;
        for (int64_t j = 0; j < d_; ++j) o[j] += w * (scale * y[j] + (b != nullptr ? b[j] : 0.0f));
      } else if (down_bias != nullptr) {
        const float* b = down_bias + static_cast<int64_t>(r.ids[s]) * d_;
        for (int64_t j = 0; j < d_; ++j) o[j] += w * (y[j] + b[j]);
      } else {
        for (int64_t j = 0; j < d_; ++j) o[j] += w * y[j];
      }
    }
  }
}

void ExpertBatch::Combine(const Routing& routing, const LayerWeights& layer, float* out) const {
  Combine(routing, out, layer.expert_down_bias.empty() ? nullptr : layer.expert_down_bias.data(),
          layer.expert_down_scale.empty() ? nullptr : layer.expert_down_scale.data());
}

kernels::ExpertActivation ExpertActivationOf(const ModelConfig& config) {
  kernels::ExpertActivation act;
  act.limit = config.swiglu_limit;
  return act;
}

void SetExpertBiasesAndScales(const LayerWeights& layer, int64_t neurons, int32_t expert,
                              int64_t begin, kernels::ExpertJob* job) {
  if (!layer.expert_gate_scale.empty()) job->gate_scale = layer.expert_gate_scale[expert];
  if (!layer.expert_up_scale.empty()) job->up_scale = layer.expert_up_scale[expert];
  if (layer.expert_gate_bias.empty()) return;
  const size_t at = static_cast<size_t>(expert * neurons + begin);
  job->gate_bias = layer.expert_gate_bias.data() + at;
  job->up_bias = layer.expert_up_bias.data() + at;
}

namespace {

// A whole layer through `executor`'s Compute: the tokens grouped by expert into `batch`,
// each expert computed on its rows, then combined in the fixed order.
void RunByRows(MoeExecutor& executor, ExpertBatch& batch, const Model& model, int layer,
               const Routing& routing, const float* x, float* out) {
  batch.Build(routing, x, model.expert_shape.hidden_size, model.config.expert_weight_on_input);
  std::vector<ExpertRows> rows;
  rows.reserve(batch.active_experts().size());
  for (int32_t e : batch.active_experts())
    rows.push_back({e, batch.tokens_of(e), batch.inputs_of(e), batch.outputs_of(e)});
  executor.Compute(layer, rows);
  batch.Combine(routing, model.layers[static_cast<size_t>(layer)], out);
}

}  // namespace

ResidentMoeExecutor::ResidentMoeExecutor(const Model& model, const HoldsExpert& holds)
    : model_(model) {
  const ModelConfig& c = model.config;
  const ExpertShape& shape = model.expert_shape;
  layer_records_.resize(static_cast<size_t>(c.num_layers));
  slot_of_.resize(static_cast<size_t>(c.num_layers));
  // Repacking reads every expert from the checkpoint: half a minute for a 13 GB model, so
  // big models say how far it is (small ones would only clutter the output).
  Progress progress("loading experts, MoE layers",
                    model.TotalExpertBytes() >= (size_t{1} << 30) ? model.NumMoeLayers() : 0);
  int moe_layers_done = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    if (!model.layers[static_cast<size_t>(l)].is_moe) continue;
    const ExpertShape& layer_shape = model.layers[static_cast<size_t>(l)].expert_shape;
    std::vector<int32_t>& slot_of = slot_of_[static_cast<size_t>(l)];
    slot_of.assign(static_cast<size_t>(c.num_experts), -1);
    std::vector<const TensorView*> sources;  // gate, up, down of each held expert
    for (int e = 0; e < c.num_experts; ++e) {
      if (holds && !holds(l, e)) continue;
      const TensorView *g, *u, *d;
      model.ExpertTensors(l, e, &g, &u, &d);
      slot_of[static_cast<size_t>(e)] = static_cast<int32_t>(sources.size() / 3);
      sources.insert(sources.end(), {g, u, d});
    }
    const size_t held = sources.size() / 3;
    AlignedBuffer buf(shape.ExpertBytes() * held);
    // The copies run on every core: the load is bound by committing the fresh memory and
    // by reading the mapped file, not by one thread's memcpy. A refused expert (a
    // non-finite scale) is raised here, on the calling thread.
    Mutex failure_mutex;
    std::exception_ptr failure;
    ThreadPool::Global().ParallelForDynamic(held, 1, [&](size_t begin, size_t end, int) {
      try {
        for (size_t e = begin; e < end; ++e)
          PackExpertNeuronMajor(*sources[3 * e], *sources[3 * e + 1], *sources[3 * e + 2],
                                layer_shape, buf.data() + shape.ExpertBytes() * e);
      } catch (...) {
        MutexLock lock(&failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    });
    if (failure) std::rethrow_exception(failure);
    // The packed copy is what runs: without this the mapped source stays resident too and
    // a model needs twice its expert bytes of RAM. Per layer rather than per expert, since
    // the kernel maps neighbouring pages around each fault and would bring them back.
    for (const TensorView* t : sources) model.weights->ReleasePages(*t);
    bytes_ += buf.size();
    layer_records_[static_cast<size_t>(l)] = std::move(buf);
    progress.Update(++moe_layers_done);
  }
}

void ResidentMoeExecutor::Run(int layer, const Routing& routing, const float* x, float* out) {
  RunByRows(*this, batch_, model_, layer, routing, x, out);
}

void MoeExecutor::Compute(int layer, std::span<const ExpertRows> rows) {
  Fail("this executor computes whole layers only (layer ", layer, ", ", rows.size(), " experts)");
}

void ResidentMoeExecutor::Compute(int layer, std::span<const ExpertRows> rows) {
  const ExpertShape& shape = model_.expert_shape;
  Check(layer >= 0 && static_cast<size_t>(layer) < slot_of_.size() &&
            !slot_of_[static_cast<size_t>(layer)].empty(),
        "layer ", layer, " has no routed experts");
  const std::vector<int32_t>& slot_of = slot_of_[static_cast<size_t>(layer)];
  std::vector<kernels::ExpertJob> jobs;
  jobs.reserve(rows.size());
  const std::byte* base = layer_records_[static_cast<size_t>(layer)].data();
  const LayerWeights& L = model_.layers[static_cast<size_t>(layer)];
  for (const ExpertRows& r : rows) {
    Check(r.expert >= 0 && static_cast<size_t>(r.expert) < slot_of.size() &&
              slot_of[static_cast<size_t>(r.expert)] >= 0,
          "expert ", r.expert, " of layer ", layer, " is not held here");
    kernels::ExpertJob job;
    job.records =
        base + shape.ExpertBytes() * static_cast<size_t>(slot_of[static_cast<size_t>(r.expert)]);
    job.neuron_count = shape.neurons;
    job.x = r.x;
    job.n = r.n;
    job.y = r.y;
    SetExpertBiasesAndScales(L, shape.neurons, r.expert, 0, &job);
    jobs.push_back(job);
  }
  kernels::ExpertFfn(jobs, L.expert_shape.Encoding(), shape.hidden_size, ThreadPool::Global(),
                     ExpertActivationOf(model_.config));
  expert_uses_ += static_cast<int64_t>(jobs.size());
}

nlohmann::json ResidentMoeExecutor::MetricsJson() const {
  return {{"policy", "resident"}, {"hits", expert_uses_}, {"misses", 0},
          {"hit_rate", 1.0},      {"bytes_read", 0},      {"stall_ms", 0.0},
          {"prefetch_issued", 0}, {"prefetch_used", 0}};
}

std::vector<std::vector<float>> ResidentMoeExecutor::ResidentShare() const {
  std::vector<std::vector<float>> share(model_.layers.size());
  for (size_t l = 0; l < share.size(); ++l)
    for (int32_t slot : slot_of_[l]) share[l].push_back(slot >= 0 ? 1.0f : 0.0f);
  return share;
}

namespace {

// Warns when the budget holds fewer experts than one token's forward pass routes to,
// naming a budget that does (and LFU for recency policies, which then miss on nearly
// every expert).
void WarnIfBudgetMissesEveryPass(const ModelConfig& config, size_t moe_layers, int64_t budget_bytes,
                                 int64_t full_bytes, const std::string& policy) {
  const int64_t experts = static_cast<int64_t>(moe_layers) * config.num_experts;
  if (experts == 0 || full_bytes <= 0) return;
  const int64_t slots =
      static_cast<int64_t>(static_cast<double>(budget_bytes) / static_cast<double>(full_bytes) *
                           static_cast<double>(experts));
  const int64_t per_pass = static_cast<int64_t>(moe_layers) * config.num_experts_per_tok;
  if (slots >= per_pass || per_pass >= experts) return;
  // A recency evictor (lru, also appended to a spec without an evictor) then evicts every
  // expert before the next token needs it again; the cycle-aware ones (cycle-lru, reuse) do
  // not.
  const int64_t percent = (100 * per_pass + experts - 1) / experts;
  const std::vector<policy::ResolvedPart> parts = policy::ResolvePolicySpec(policy);
  const bool recency = parts.empty() || !(parts.back().info->roles & policy::kEvicts) ||
                       parts.back().info->recency_eviction;
  Log(LogLevel::kWarn, "the host budget holds about ", slots, " experts, fewer than the ", per_pass,
      " one token's forward pass uses (top-", config.num_experts_per_tok, " x ", moe_layers,
      " MoE layers)",
      recency ? ": a recency policy such as LRU will miss on nearly "
                "every expert"
              : "",
      "; use --host-budget ", percent, "% or more", recency ? ", or --policy reuse" : "");
}

}  // namespace

OffloadMoeExecutor::OffloadMoeExecutor(const Model& model, const OffloadOptions& options)
    : model_(model) {
  PackOptions pack;
  pack.source_id = ModelContentId(model.path);
  pack.out_path = options.store_path.empty() ? DefaultExpertStorePath(model.path, pack.source_id)
                                             : options.store_path;
  pack.source_path = model.path;
  pack.progress = options.progress;
  ExpertStore store = OpenOrPackExpertStore(*model.weights, model.config, pack);
  tiers::HostTierOptions host;
  host.policy = options.policy;
  host.weights = model.weights.get();
  host.queue_depth = options.queue_depth;
  const int chunk =
      options.chunk_neurons > 0 ? options.chunk_neurons : tiers::HostTier::AutoChunkNeurons(store);
  host.chunk_neurons = chunk;
  int64_t full = tiers::HostTier::FullFootprint(store, chunk);
  if (options.holds) {
    // A share is of this rank's experts (every expert's footprint is the same), as in the
    // simulator's ranks.
    const int64_t all = static_cast<int64_t>(store.moe_layers().size()) * model.config.num_experts;
    int64_t own = 0;
    for (int l : store.moe_layers())
      for (int e = 0; e < model.config.num_experts; ++e) own += options.holds(l, e) ? 1 : 0;
    full = all > 0 ? full / all * own : 0;
  }
  host.budget_bytes = ParseBudget(options.host_budget, full);
  if (!options.holds)
    WarnIfBudgetMissesEveryPass(model.config, store.moe_layers().size(), host.budget_bytes, full,
                                options.policy.spec);
  tier_ = std::make_unique<tiers::HostTier>(std::move(store), model.config, host);
  if (options.holds)
    tier_->controller().set_owner(
        [holds = options.holds](const policy::ExpertKey& k) { return holds(k.layer, k.expert); });
}

void OffloadMoeExecutor::Run(int layer, const Routing& routing, const float* x, float* out) {
  RunByRows(*this, batch_, model_, layer, routing, x, out);
}

void OffloadMoeExecutor::Compute(int layer, std::span<const ExpertRows> rows) {
  const ExpertShape& shape = model_.expert_shape;
  row_of_expert_.assign(static_cast<size_t>(model_.config.num_experts), -1);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int32_t e = rows[i].expert;
    Check(e >= 0 && e < model_.config.num_experts, "expert ", e, " of layer ", layer,
          " does not exist");
    row_of_expert_[static_cast<size_t>(e)] = static_cast<int32_t>(i);
  }
  std::vector<kernels::ExpertJob> jobs;
  std::vector<char> computed(rows.size(), 0);
  const LayerWeights& L = model_.layers[static_cast<size_t>(layer)];
  const kernels::ExpertActivation act = ExpertActivationOf(model_.config);
  RunOffloadedLayer(*tier_, layer, [&](std::span<const ChunkTask> tasks) {
    jobs.clear();
    for (const ChunkTask& t : tasks) {
      const int32_t i = row_of_expert_[static_cast<size_t>(t.expert)];
      Check(i >= 0, "the gate of layer ", layer, " routed expert ", t.expert,
            ", which was given no rows");
      const ExpertRows& r = rows[static_cast<size_t>(i)];
      computed[static_cast<size_t>(i)] = 1;
      kernels::ExpertJob job;
      job.records = t.records;
      job.neuron_count = t.neuron_count;
      job.x = r.x;
      job.n = r.n;
      job.y = r.y;
      SetExpertBiasesAndScales(L, shape.neurons, t.expert, t.neuron_begin, &job);
      jobs.push_back(job);
    }
    kernels::ExpertFfn(jobs, L.expert_shape.Encoding(), shape.hidden_size, ThreadPool::Global(),
                       act);
  });
  for (size_t i = 0; i < rows.size(); ++i)
    Check(computed[i] != 0, "expert ", rows[i].expert, " of layer ", layer,
          " was given rows but its gate did not route it");
}

nlohmann::json OffloadMoeExecutor::MetricsJson() const {
  return tier_->Metrics().ToJson();
}

std::vector<std::vector<float>> OffloadMoeExecutor::ResidentShare() const {
  const tiers::ExpertCache& cache = tier_->controller().cache();
  const int chunks = cache.geometry().chunks_per_expert();
  std::vector<std::vector<float>> share(model_.layers.size());
  for (int layer : tier_->store().moe_layers()) {
    std::vector<float>& row = share[static_cast<size_t>(layer)];
    row.resize(static_cast<size_t>(model_.config.num_experts));
    for (int e = 0; e < model_.config.num_experts; ++e)
      row[static_cast<size_t>(e)] =
          static_cast<float>(cache.PresentChunks({layer, e})) / static_cast<float>(chunks);
  }
  return share;
}

size_t OffloadMoeExecutor::HostCacheBytes() const {
  const tiers::OffloadMetrics m = tier_->Metrics();
  return static_cast<size_t>(m.host_cache_bytes + m.staging_bytes);
}

}  // namespace moex

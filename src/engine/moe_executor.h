// Runs the routed experts of one MoE layer. Each expert's output is accumulated in its own
// buffer and the weighted outputs are combined in a fixed order (token by token, in top-k
// rank order), so the result does not depend on the order in which experts are computed —
// the property that lets an offloading executor compute experts as they land, losslessly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/aligned_buffer.h"
#include "engine/router.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "policy/event_sink.h"
#include "policy/events.h"
#include "tiers/host_tier.h"

namespace moex {

// One expert's share of a layer's tokens: y[n, d] += expert(x[n, d]).
struct ExpertRows {
  int32_t expert = 0;
  int64_t n = 0;
  const float* x = nullptr;
  float* y = nullptr;
};

// Which routed experts an executor holds: all of them, or (expert parallelism,
// src/dist) one rank's share.
using HoldsExpert = std::function<bool(int layer, int expert)>;

class MoeExecutor {
 public:
  virtual ~MoeExecutor() = default;
  // out[t, :] += sum over k of routing.weights[t, k] * expert_{ids[t, k]}(x[t, :]), or of
  // expert_{ids[t, k]}(routing.weights[t, k] * x[t, :]) with config.expert_weight_on_input.
  virtual void Run(int layer, const Routing& routing, const float* x, float* out) = 0;
  // Computes each listed expert of `layer` on its rows (expert parallelism's share of a
  // layer, src/dist). With an offload stack, its gate event must have been emitted to
  // event_sink() first, naming exactly these experts. Throws Error for an expert this
  // executor does not hold, and in an executor that only runs whole layers.
  virtual void Compute(int layer, std::span<const ExpertRows> rows);
  // Offload counters (hits, misses, bytes read, stall time, prefetches) as reported by
  // `generate --json` and `bench --json`.
  virtual nlohmann::json MetricsJson() const = 0;
  // Bytes of expert weights currently held in host memory by this executor.
  virtual size_t HostCacheBytes() const = 0;
  // Per decoder layer, the share of each routed expert's weights held in host memory now
  // (1: all of it): rows of num_experts for MoE layers, empty rows for the others. Read it
  // between forward passes, on the thread that runs them.
  virtual std::vector<std::vector<float>> ResidentShare() const = 0;

  // The offload stack behind this executor, which the transformer's events must reach (it
  // plans each gate's demand before Run computes it); null when nothing is offloaded.
  virtual policy::EventSink* event_sink() { return nullptr; }
  // Token regrouping for the server's scheduler (policy::Policy::RegroupPasses); null when
  // there is no policy to ask.
  virtual policy::PassRegrouper* regrouper() { return nullptr; }
};

// Groups a layer's tokens by expert and combines per-expert outputs in the fixed order.
// Executors differ only in how they obtain and compute the experts' records.
class ExpertBatch {
 public:
  // Builds per-expert token lists and gathered inputs for this routing. With
  // `weight_on_input` (ModelConfig::expert_weight_on_input, Llama 4) each gathered input row
  // is x[t] times its routing weight, and Combine then adds the outputs unweighted.
  void Build(const Routing& routing, const float* x, int64_t d_model, bool weight_on_input);
  // Experts with at least one token, in ascending id order.
  const std::vector<int32_t>& active_experts() const { return active_; }
  int64_t tokens_of(int32_t expert) const;
  const float* inputs_of(int32_t expert) const;
  float* outputs_of(int32_t expert);
  // out[t] += w[t, k] * y_{ids[t, k]}[row of t] (w = 1 when Build weighted the inputs),
  // tokens in order, k in rank order; with
  // `down_scale` ([E], llama.cpp's per-expert .scale) and `down_bias` ([E, d], gpt-oss)
  // each expert output is scale * y + bias before it is weighted.
  void Combine(const Routing& routing, float* out, const float* down_bias = nullptr,
               const float* down_scale = nullptr) const;
  // The same with `layer`'s expert down bias and scale (empty: none).
  void Combine(const Routing& routing, const LayerWeights& layer, float* out) const;

 private:
  int64_t d_ = 0;
  bool weight_on_input_ = false;
  std::vector<int32_t> active_;
  std::vector<int64_t> begin_;        // [E + 1] row offsets of each expert's tokens.
  std::vector<int64_t> row_of_slot_;  // [n * k] row within the gathered buffers.
  std::vector<float> x_;              // Gathered inputs, expert-major.
  std::vector<float> y_;              // Per-expert outputs, same rows.
};

// The expert activation of `config` (gpt-oss's clamped SwiGLU or plain SwiGLU).
kernels::ExpertActivation ExpertActivationOf(const ModelConfig& config);
// Sets job's gate/up bias pointers for neurons [begin, ...) of `expert` (gpt-oss) and its
// gate/up scales (files with llama.cpp's per-expert .scale tensors).
void SetExpertBiasesAndScales(const LayerWeights& layer, int64_t neurons, int32_t expert,
                              int64_t begin, kernels::ExpertJob* job);

// Experts resident in host memory, packed neuron-major at construction: every routed expert,
// or those `holds` names (the others take no memory, and computing one is an error).
class ResidentMoeExecutor : public MoeExecutor {
 public:
  explicit ResidentMoeExecutor(const Model& model, const HoldsExpert& holds = nullptr);
  void Run(int layer, const Routing& routing, const float* x, float* out) override;
  // In one kernel call.
  void Compute(int layer, std::span<const ExpertRows> rows) override;
  nlohmann::json MetricsJson() const override;
  size_t HostCacheBytes() const override { return bytes_; }
  std::vector<std::vector<float>> ResidentShare() const override;

 private:
  const Model& model_;
  std::vector<AlignedBuffer> layer_records_;   // Per layer: the held experts, F records each.
  std::vector<std::vector<int32_t>> slot_of_;  // Per layer: expert -> slot, -1 if not held.
  size_t bytes_ = 0;
  int64_t expert_uses_ = 0;  // (layer, expert) activations, every one a hit.
  ExpertBatch batch_;
};

// Where the offloading executor gets its experts and how much it may cache.
struct OffloadOptions {
  std::string store_path;  // Empty: DefaultExpertStorePath (model/store_location.h).
  std::string host_budget = "25%";  // Bytes ("4GiB") or a share of all expert bytes ("25%").
  tiers::PolicyOptions policy;
  bool progress = true;             // Progress bar when the store must be packed.
  int queue_depth = 32;             // Reads in flight.
  int chunk_neurons = 0;            // Transfer and residency unit; 0: the store's choice.
  // Expert parallelism: only these experts are this executor's (the others are another
  // rank's). A share budget ("25%") is then of these experts' bytes, and the policy's
  // prefetches of the others are ignored (OffloadController::set_owner). Null: every expert.
  HoldsExpert holds;
};

// Routed experts stream from the expert store through a budgeted host cache. After the
// gate, resident experts are computed first, then the rest chunk by chunk as they land;
// every chunk is a partial expert added to that expert's own buffer, so the result is
// bit-identical to ResidentMoeExecutor whatever the budget, policy or landing order.
class OffloadMoeExecutor : public MoeExecutor {
 public:
  // Opens the model's expert store, packing it first when missing, stale or corrupt.
  OffloadMoeExecutor(const Model& model, const OffloadOptions& options);
  void Run(int layer, const Routing& routing, const float* x, float* out) override;
  void Compute(int layer, std::span<const ExpertRows> rows) override;
  nlohmann::json MetricsJson() const override;
  size_t HostCacheBytes() const override;
  std::vector<std::vector<float>> ResidentShare() const override;

  policy::EventSink* event_sink() override { return tier_.get(); }
  policy::PassRegrouper* regrouper() override { return &tier_->controller(); }

  tiers::HostTier& tier() { return *tier_; }
  tiers::OffloadMetrics Metrics() const { return tier_->Metrics(); }

 private:
  const Model& model_;
  std::unique_ptr<tiers::HostTier> tier_;
  ExpertBatch batch_;
  std::vector<int32_t> row_of_expert_;  // Compute: expert -> index into its rows, -1 if none.
};

}  // namespace moex

// Runs the routed experts of one MoE layer. Each expert's output is accumulated in its own
// buffer and the weighted outputs are combined in a fixed order (token by token, in top-k
// rank order), so the result does not depend on the order in which experts are computed —
// the property that lets an offloading executor compute experts as they land, losslessly.
#pragma once

#include <cstdint>
#include <vector>

#include "core/aligned_buffer.h"
#include "engine/router.h"
#include "model/model.h"

namespace moex {

class MoeExecutor {
 public:
  virtual ~MoeExecutor() = default;
  // out[t, :] += sum over k of routing.weights[t, k] * expert_{ids[t, k]}(x[t, :]).
  virtual void Run(int layer, const Routing& routing, const float* x, float* out) = 0;
};

// Groups a layer's tokens by expert and combines per-expert outputs in the fixed order.
// Executors differ only in how they obtain and compute the experts' records.
class ExpertBatch {
 public:
  // Builds per-expert token lists and gathered inputs for this routing.
  void Build(const Routing& routing, const float* x, int64_t d_model);
  // Experts with at least one token, in ascending id order.
  const std::vector<int32_t>& active_experts() const { return active_; }
  int64_t tokens_of(int32_t expert) const;
  const float* inputs_of(int32_t expert) const;
  float* outputs_of(int32_t expert);
  // out[t] += w[t, k] * y_{ids[t, k]}[row of t], tokens in order, k in rank order.
  void Combine(const Routing& routing, float* out) const;

 private:
  int64_t d_ = 0;
  std::vector<int32_t> active_;
  std::vector<int64_t> begin_;        // [E + 1] row offsets of each expert's tokens.
  std::vector<int64_t> row_of_slot_;  // [n * k] row within the gathered buffers.
  std::vector<float> x_;              // Gathered inputs, expert-major.
  std::vector<float> y_;              // Per-expert outputs, same rows.
};

// All experts resident in host memory, packed neuron-major at construction.
class ResidentMoeExecutor : public MoeExecutor {
 public:
  explicit ResidentMoeExecutor(const Model& model);
  void Run(int layer, const Routing& routing, const float* x, float* out) override;
  size_t resident_bytes() const { return bytes_; }

 private:
  const Model& model_;
  std::vector<AlignedBuffer> layer_records_;  // Per layer: E experts, F records each.
  size_t bytes_ = 0;
  ExpertBatch batch_;
};

}  // namespace moex

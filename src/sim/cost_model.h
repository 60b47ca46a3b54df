// Modelled compute time of one forward pass, piece by piece, for a model shape on a
// hardware profile. Each piece costs max(weight bytes / bandwidth, flops / throughput) plus
// fixed overheads: decode is bound by streaming weights, prefill by arithmetic.
#pragma once

#include <cstdint>

#include "model/model_config.h"
#include "sim/hardware_profile.h"

namespace moex::sim {

class CostModel {
 public:
  // `weight_bytes_per_param`: 2 for BF16/F16 weights. `kv_bytes_per_value` for the KV cache.
  CostModel(const HardwareProfile& hardware, const ModelConfig& config,
            double weight_bytes_per_param, double kv_bytes_per_value);

  // Attention block of one layer (norm, q/k/v/o projections, router, reading `kv_positions`
  // cached positions summed over the tokens' sequences) for `tokens` tokens.
  double AttentionMs(int64_t tokens, int64_t kv_positions) const;
  // The dense FFN of a non-MoE layer, or the shared expert(s) of a MoE layer (0 if none).
  double DenseFfnMs(int layer, int64_t tokens) const;
  // `neurons` neurons of one routed expert over `tokens` tokens (a chunk or a whole expert).
  double ExpertMs(int64_t tokens, int neurons) const;
  double ExpertOverheadMs() const { return hardware_.op_overhead_us / 1e3; }
  double LayerOverheadMs() const { return hardware_.layer_overhead_us / 1e3; }
  // Final norm and LM head for `rows` rows of logits.
  double HeadMs(int64_t rows) const;

  const ModelConfig& config() const { return config_; }

 private:
  double OpMs(double weight_params, int64_t tokens, double extra_bytes = 0) const;

  HardwareProfile hardware_;
  ModelConfig config_;
  double weight_bytes_;
  double kv_bytes_;
};

}  // namespace moex::sim

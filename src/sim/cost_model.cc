#include "sim/cost_model.h"

#include <algorithm>

namespace moex::sim {

CostModel::CostModel(const HardwareProfile& hardware, const ModelConfig& config,
                     double weight_bytes_per_param, double kv_bytes_per_value)
    : hardware_(hardware),
      config_(config),
      weight_bytes_(weight_bytes_per_param),
      kv_bytes_(kv_bytes_per_value) {}

double CostModel::OpMs(double weight_params, int64_t tokens, double extra_bytes) const {
  const double bytes = weight_params * weight_bytes_ + extra_bytes;
  const double flops = 2.0 * weight_params * static_cast<double>(tokens);
  const double memory_ms = bytes / (hardware_.compute_gb_per_s * 1e9) * 1e3;
  const double compute_ms = flops / (hardware_.compute_tflops * 1e12) * 1e3;
  return std::max(memory_ms, compute_ms);
}

double CostModel::AttentionMs(int64_t tokens, int64_t kv_positions) const {
  const ModelConfig& c = config_;
  const double d = c.hidden_size;
  if (c.mla) {  // MLA: its projections, and one cached latent row per position.
    const Mla& m = *c.mla;
    const double H = c.num_heads, row = m.cache_row();
    const double q = m.q_lora_rank > 0 ? d * m.q_lora_rank + m.q_lora_rank * H * m.qk_head_dim()
                                       : d * H * m.qk_head_dim();
    const double params = q + d * row + m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim) +
                          H * m.v_head_dim * d + d * c.num_experts;
    return OpMs(params, tokens, static_cast<double>(kv_positions) * row * kv_bytes_);
  }
  const double q_dim = static_cast<double>(c.num_heads) * c.head_dim;
  const double kv_dim = static_cast<double>(c.num_kv_heads) * c.head_dim;
  const double params = d * q_dim + 2 * d * kv_dim + q_dim * d + d * c.num_experts;
  // Each token reads its sequence's keys and values: 2 * kv_dim values per position.
  const double kv_bytes = static_cast<double>(kv_positions) * 2 * kv_dim * kv_bytes_;
  return OpMs(params, tokens, kv_bytes);
}

double CostModel::DenseFfnMs(int layer, int64_t tokens) const {
  const ModelConfig& c = config_;
  const double d = c.hidden_size;
  double neurons = 0;
  if (!c.IsMoeLayer(layer))
    neurons = c.intermediate_size;
  else
    neurons = c.shared_expert_intermediate_size;
  if (neurons <= 0) return 0;
  return OpMs(3 * d * neurons, tokens);
}

double CostModel::ExpertMs(int64_t tokens, int neurons) const {
  return OpMs(3.0 * config_.hidden_size * neurons, tokens);
}

double CostModel::HeadMs(int64_t rows) const {
  return OpMs(static_cast<double>(config_.hidden_size) * config_.vocab_size, rows);
}

}  // namespace moex::sim

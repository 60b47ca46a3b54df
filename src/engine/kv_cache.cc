#include "engine/kv_cache.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/delta_rule.h"

namespace moex {

namespace {

int64_t RowSize(const ModelConfig& config) {
  return config.mla ? config.mla->cache_row()
                    : static_cast<int64_t>(config.num_kv_heads) * config.head_dim;
}

// Floats one Gated DeltaNet layer keeps per sequence.
int64_t StateFloats(const GatedDeltaNet& g) {
  return (g.conv_kernel - 1) * g.conv_dim() +
         g.num_v_heads * kernels::DeltaRuleState::Floats(g.k_head_dim, g.v_head_dim);
}

int AttentionLayers(const ModelConfig& config) {
  int n = 0;
  for (int l = 0; l < config.num_layers; ++l) n += config.IsLinearLayer(l) ? 0 : 1;
  return n;
}

}  // namespace

KvCache::KvCache(const ModelConfig& config, int64_t capacity)
    : capacity_(capacity), row_size_(RowSize(config)), num_layers_(config.num_layers) {
  Check(capacity > 0, "KV cache capacity must be positive");
  int rows = 0, states = 0;
  for (int l = 0; l < config.num_layers; ++l) {
    const bool linear = config.IsLinearLayer(l);
    row_slot_.push_back(linear ? -1 : rows++);
    if (config.delta_net) state_slot_.push_back(linear ? states++ : -1);
  }
  const size_t n =
      static_cast<size_t>(rows) * static_cast<size_t>(capacity) * static_cast<size_t>(row_size_);
  keys_.assign(n, 0.0f);
  if (!config.mla) values_.assign(n, 0.0f);
  if (config.delta_net) {
    conv_floats_ = (config.delta_net->conv_kernel - 1) * config.delta_net->conv_dim();
    state_floats_ = StateFloats(*config.delta_net);
    state_.assign(static_cast<size_t>(states) * static_cast<size_t>(state_floats_), 0.0f);
  }
}

size_t KvCache::BytesPerToken(const ModelConfig& config) {
  return static_cast<size_t>(AttentionLayers(config)) * static_cast<size_t>(RowSize(config)) *
         (config.mla ? 1 : 2) * sizeof(float);
}

size_t KvCache::StateBytes(const ModelConfig& config) {
  if (!config.delta_net) return 0;
  return static_cast<size_t>(config.num_layers - AttentionLayers(config)) *
         static_cast<size_t>(StateFloats(*config.delta_net)) * sizeof(float);
}

void KvCache::Advance(int64_t count) {
  Check(length_ + count <= capacity_, "sequence of ", length_ + count,
        " tokens exceeds its context capacity of ", capacity_, " tokens");
  length_ += count;
}

void KvCache::Reset() {
  length_ = 0;
  std::fill(state_.begin(), state_.end(), 0.0f);
  state_lost_ = false;
}

}  // namespace moex

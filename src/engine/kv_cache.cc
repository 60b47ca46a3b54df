#include "engine/kv_cache.h"

#include "core/error.h"

namespace moex {

namespace {

int64_t RowSize(const ModelConfig& config) {
  return config.mla ? config.mla->cache_row()
                    : static_cast<int64_t>(config.num_kv_heads) * config.head_dim;
}

}  // namespace

KvCache::KvCache(const ModelConfig& config, int64_t capacity)
    : capacity_(capacity), row_size_(RowSize(config)), num_layers_(config.num_layers) {
  Check(capacity > 0, "KV cache capacity must be positive");
  const size_t n = static_cast<size_t>(config.num_layers) * static_cast<size_t>(capacity) *
                   static_cast<size_t>(row_size_);
  keys_.assign(n, 0.0f);
  if (!config.mla) values_.assign(n, 0.0f);
}

size_t KvCache::BytesPerToken(const ModelConfig& config) {
  return static_cast<size_t>(config.num_layers) * static_cast<size_t>(RowSize(config)) *
         (config.mla ? 1 : 2) * sizeof(float);
}

void KvCache::Advance(int64_t count) {
  Check(length_ + count <= capacity_, "sequence of ", length_ + count,
        " tokens exceeds its context capacity of ", capacity_, " tokens");
  length_ += count;
}

}  // namespace moex

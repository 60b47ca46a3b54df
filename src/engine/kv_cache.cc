#include "engine/kv_cache.h"

#include "core/error.h"

namespace moex {

KvCache::KvCache(const ModelConfig& config, int64_t capacity)
    : capacity_(capacity), row_size_(static_cast<int64_t>(config.num_kv_heads) * config.head_dim) {
  Check(capacity > 0, "KV cache capacity must be positive");
  const size_t n = static_cast<size_t>(config.num_layers) * static_cast<size_t>(capacity) *
                   static_cast<size_t>(row_size_);
  keys_.assign(n, 0.0f);
  values_.assign(n, 0.0f);
}

void KvCache::Advance(int64_t count) {
  Check(length_ + count <= capacity_, "sequence of ", length_ + count,
        " tokens exceeds its context capacity of ", capacity_, " tokens");
  length_ += count;
}

}  // namespace moex

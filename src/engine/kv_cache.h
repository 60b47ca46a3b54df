// Per-sequence key/value cache: for every layer, K and V rows of num_kv_heads * head_dim
// f32 values per position. MLA models (config.mla) cache one latent row per position
// instead: the normalised kv latent and the rotated k_pe (Mla::cache_row() floats, in
// keys(); values() is null), which is what makes their cache small. Capacity is fixed
// when the sequence starts, so the forward pass never reallocates while other sequences
// of the batch hold pointers into their caches.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace moex {

class KvCache {
 public:
  KvCache(const ModelConfig& config, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }
  int64_t row_size() const { return row_size_; }
  // Rows [0, capacity) of layer `layer`.
  float* keys(int layer) { return &keys_[Offset(layer)]; }
  float* values(int layer) { return values_.empty() ? nullptr : &values_[Offset(layer)]; }
  const float* keys(int layer) const { return &keys_[Offset(layer)]; }
  const float* values(int layer) const {
    return values_.empty() ? nullptr : &values_[Offset(layer)];
  }
  int num_layers() const { return num_layers_; }
  // Marks `count` more positions as filled; throws Error past capacity.
  void Advance(int64_t count);
  // Empties the cache for another sequence (its rows are overwritten before they are read).
  void Reset() { length_ = 0; }
  size_t bytes() const { return (keys_.size() + values_.size()) * sizeof(float); }
  // Bytes one position takes over all layers (K and V, or MLA's latent row).
  static size_t BytesPerToken(const ModelConfig& config);

 private:
  size_t Offset(int layer) const {
    return static_cast<size_t>(layer) * static_cast<size_t>(capacity_ * row_size_);
  }
  int64_t capacity_;
  int64_t row_size_;
  int num_layers_;
  int64_t length_ = 0;
  std::vector<float> keys_;
  std::vector<float> values_;
};

}  // namespace moex

// Per-sequence key/value cache: for every attention layer, K and V rows of
// num_kv_heads * head_dim f32 values per position. MLA models (config.mla) cache one latent
// row per position instead: the normalised kv latent and the rotated k_pe (Mla::cache_row()
// floats, in keys(); values() is null), which is what makes their cache small. Gated DeltaNet
// layers (config.delta_net) cache no rows: the sequence keeps their state instead, a fixed
// size whatever its length (the convolution's window and the recurrent state). Capacity is
// fixed when the sequence starts, so the forward pass never reallocates while other
// sequences of the batch hold pointers into their caches.
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
  // Rows [0, capacity) of layer `layer`; null for a Gated DeltaNet layer.
  float* keys(int layer) { return RowsOf(keys_, layer); }
  float* values(int layer) { return values_.empty() ? nullptr : RowsOf(values_, layer); }
  const float* keys(int layer) const { return const_cast<KvCache*>(this)->keys(layer); }
  const float* values(int layer) const { return const_cast<KvCache*>(this)->values(layer); }
  int num_layers() const { return num_layers_; }

  // Gated DeltaNet layers only (null for the others): the convolution's window, the last
  // conv_kernel - 1 inputs [conv_kernel - 1, conv_dim] oldest first, and the recurrent state,
  // per v head one block of kernels::DeltaRuleState::Floats(k_head_dim, v_head_dim) floats
  // (the state at the current chunk's start and the chunk's tokens so far,
  // kernels/delta_rule.h). Zero for an empty sequence. A pass updates them in place, so a
  // pass that fails midway leaves them partly updated: the forward pass then calls
  // MarkStateLost and refuses the sequence until Reset.
  float* conv_state(int layer) { return StateOf(layer); }
  float* recurrent_state(int layer) {
    float* s = StateOf(layer);
    return s == nullptr ? nullptr : s + conv_floats_;
  }
  bool has_state() const { return !state_.empty(); }
  bool state_lost() const { return state_lost_; }
  void MarkStateLost() { state_lost_ = has_state(); }

  // Marks `count` more positions as filled; throws Error past capacity.
  void Advance(int64_t count);
  // Empties the cache for another sequence (its rows are overwritten before they are read;
  // the recurrent state is zeroed).
  void Reset();
  size_t bytes() const { return (keys_.size() + values_.size() + state_.size()) * sizeof(float); }
  // Bytes one position takes over all layers (K and V, or MLA's latent row).
  static size_t BytesPerToken(const ModelConfig& config);
  // Bytes a sequence keeps whatever its length: the Gated DeltaNet layers' state (the
  // model's, GatedDeltaNet::state_floats, and the current chunk's tokens).
  static size_t StateBytes(const ModelConfig& config);

 private:
  float* RowsOf(std::vector<float>& rows, int layer) {
    const int slot = row_slot_[static_cast<size_t>(layer)];
    return slot < 0 ? nullptr
                    : &rows[static_cast<size_t>(slot) * static_cast<size_t>(capacity_ * row_size_)];
  }
  float* StateOf(int layer) {
    const int slot = state_slot_.empty() ? -1 : state_slot_[static_cast<size_t>(layer)];
    return slot < 0 ? nullptr
                    : &state_[static_cast<size_t>(slot) * static_cast<size_t>(state_floats_)];
  }
  int64_t capacity_;
  int64_t row_size_;
  int num_layers_;
  int64_t length_ = 0;
  std::vector<int> row_slot_;    // Per layer: its rows' index, or -1 (no rows).
  std::vector<int> state_slot_;  // Per layer: its state's index, or -1; empty without state.
  int64_t conv_floats_ = 0;
  int64_t state_floats_ = 0;
  bool state_lost_ = false;
  std::vector<float> keys_;
  std::vector<float> values_;
  std::vector<float> state_;
};

}  // namespace moex

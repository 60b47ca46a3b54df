// Rotary-embedding tables. The angle is computed the way HF transformers does it, in f32
// (inv_freq = 1 / theta^(2i/d), angle = float(pos) * inv_freq), so long positions round
// exactly as the reference implementation does.
//
// LongRoPE (Phi-3.5-MoE's "longrope" rope_scaling) keeps two sets of frequencies:
// inv_freq_i = 1 / (factor_i * theta^(2i/d)) with the short or the long factors, and scales
// cos and sin by short_mscale or long_mscale. Like HF, the set is chosen by the length of
// the sequence at the end of the forward pass that computes the rotation (HF:
// cache_position[-1] + 1): long when it exceeds original_max_position_embeddings. Keys
// already in the KV cache keep the rotation they were computed with.
//
// YaRN (DeepSeek-V2/V3's rope_scaling "yarn", HF DeepseekV2YarnRotaryEmbedding): one set,
// inv_freq_i = inter_i (1 - mask_i) + extra_i mask_i with extra_i = 1 / theta^(2i/d),
// inter_i = extra_i / factor and mask_i = 1 - clamp((i - low) / (high - low), 0, 1), where
// low/high are the floor/ceil of the dimensions whose wavelength makes beta_fast/beta_slow
// rotations over original_max_position_embeddings (unrounded when yarn.truncate is false,
// HF's generic YaRN for gpt-oss); cos and sin are scaled by
// YarnMscale(factor, mscale) / YarnMscale(factor, mscale_all_dim).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace moex {

// YaRN's magnitude correction: scale <= 1 ? 1 : 0.1 * m * ln(scale) + 1.
double YarnMscale(double scale, double m);

class RopeTable {
 public:
  // Plain RoPE, or LongRoPE when `longrope` is given (its factor lists need head_dim / 2
  // entries each; throws Error otherwise).
  RopeTable(int64_t head_dim, float theta, const LongRope* longrope = nullptr);
  // YaRN over head_dim / 2 frequencies.
  RopeTable(int64_t head_dim, float theta, const Yarn& yarn);
  // The model's RoPE: config.longrope or config.yarn when set, else plain.
  explicit RopeTable(const ModelConfig& config);

  // cos/sin (each head_dim/2 values) for `position` within a forward pass after which the
  // sequence is `seq_len` tokens long (seq_len only matters for LongRoPE).
  void Angles(int64_t position, int64_t seq_len, float* cos_out, float* sin_out) const;
  // True when a forward pass ending at `seq_len` tokens uses LongRoPE's long set.
  bool UsesLong(int64_t seq_len) const;
  int64_t half() const { return static_cast<int64_t>(short_.inv_freq.size()); }

 private:
  struct Set {
    std::vector<float> inv_freq;
    float mscale = 1.0f;
  };
  Set short_;   // Plain RoPE keeps its one set here.
  Set long_;    // Empty without LongRoPE.
  int64_t original_max_ = 0;
};

}  // namespace moex

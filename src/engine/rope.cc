#include "engine/rope.h"

#include <cmath>

#include "core/error.h"

namespace moex {

namespace {

// inv_freq_i = 1 / (factor_i * theta^(2i/d)) in f32, as HF computes it (factor 1: plain).
std::vector<float> InvFreq(int64_t head_dim, float theta, const std::vector<float>* factors) {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float base = std::pow(theta, exponent);
    const float scaled = factors != nullptr ? (*factors)[static_cast<size_t>(i)] * base : base;
    inv[static_cast<size_t>(i)] = 1.0f / scaled;
  }
  return inv;
}

}  // namespace

RopeTable::RopeTable(int64_t head_dim, float theta, const LongRope* longrope) {
  if (longrope == nullptr) {
    short_.inv_freq = InvFreq(head_dim, theta, nullptr);
    return;
  }
  const size_t half = static_cast<size_t>(head_dim / 2);
  Check(longrope->short_factor.size() == half && longrope->long_factor.size() == half,
        "longrope: short_factor and long_factor need head_dim / 2 = ", half, " entries, got ",
        longrope->short_factor.size(), " and ", longrope->long_factor.size());
  Check(longrope->original_max_position_embeddings > 0,
        "longrope: original_max_position_embeddings must be > 0");
  short_ = {InvFreq(head_dim, theta, &longrope->short_factor), longrope->short_mscale};
  long_ = {InvFreq(head_dim, theta, &longrope->long_factor), longrope->long_mscale};
  original_max_ = longrope->original_max_position_embeddings;
}

RopeTable::RopeTable(const ModelConfig& config)
    : RopeTable(config.head_dim, config.rope_theta,
                config.longrope ? &*config.longrope : nullptr) {}

bool RopeTable::UsesLong(int64_t seq_len) const {
  return !long_.inv_freq.empty() && seq_len > original_max_;
}

void RopeTable::Angles(int64_t position, int64_t seq_len, float* cos_out, float* sin_out) const {
  const Set& set = UsesLong(seq_len) ? long_ : short_;
  const float p = static_cast<float>(position);
  for (size_t i = 0; i < set.inv_freq.size(); ++i) {
    const float angle = p * set.inv_freq[i];
    // mscale is 1 for plain RoPE, so those products are exact.
    cos_out[i] = std::cos(angle) * set.mscale;
    sin_out[i] = std::sin(angle) * set.mscale;
  }
}

}  // namespace moex

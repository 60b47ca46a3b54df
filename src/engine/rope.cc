#include "engine/rope.h"

#include <algorithm>
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

double YarnMscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

namespace {

// The dimension index whose wavelength fits `rotations` turns into `max_pos` positions.
double YarnCorrectionDim(double rotations, int64_t dim, double theta, int max_pos) {
  return static_cast<double>(dim) * std::log(max_pos / (rotations * 2.0 * M_PI)) /
         (2.0 * std::log(theta));
}

}  // namespace

RopeTable::RopeTable(int64_t head_dim, float theta, const Yarn& yarn) {
  const int64_t half = head_dim / 2;
  double low = YarnCorrectionDim(yarn.beta_fast, head_dim, theta,
                                 yarn.original_max_position_embeddings);
  double high = YarnCorrectionDim(yarn.beta_slow, head_dim, theta,
                                  yarn.original_max_position_embeddings);
  if (yarn.truncate) {  // HF's generic YaRN with truncate false keeps the fractional range.
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(head_dim - 1));
  if (low == high) high += 0.001;  // Avoids a division by zero, as HF.
  short_.inv_freq.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float ramp = static_cast<float>(
        std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0));
    const float mask = 1.0f - ramp;  // 1: keep the original frequency (extrapolate).
    const float base =
        std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    const float e = 1.0f / base;
    const float inter = 1.0f / (yarn.factor * base);
    short_.inv_freq[static_cast<size_t>(i)] = inter * (1.0f - mask) + e * mask;
  }
  short_.mscale = static_cast<float>(YarnMscale(yarn.factor, yarn.mscale) /
                                     YarnMscale(yarn.factor, yarn.mscale_all_dim));
}

// Partial rotary (config.rope_dim) computes its frequencies over the rotated values only,
// as HF's inv_freq over int(head_dim * partial_rotary_factor) dimensions.
RopeTable::RopeTable(const ModelConfig& config)
    : RopeTable(config.RotaryDim(), config.rope_theta,
                config.longrope ? &*config.longrope : nullptr) {
  if (config.yarn) *this = RopeTable(config.RotaryDim(), config.rope_theta, *config.yarn);
}

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

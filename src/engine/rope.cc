#include "engine/rope.h"

#include <cmath>

namespace moex {

RopeTable::RopeTable(int64_t head_dim, float theta) {
  inv_freq_.resize(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq_[static_cast<size_t>(i)] = 1.0f / std::pow(theta, exponent);
  }
}

void RopeTable::Angles(int64_t position, float* cos_out, float* sin_out) const {
  const float p = static_cast<float>(position);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float angle = p * inv_freq_[i];
    cos_out[i] = std::cos(angle);
    sin_out[i] = std::sin(angle);
  }
}

}  // namespace moex

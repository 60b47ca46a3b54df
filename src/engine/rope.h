// Rotary-embedding tables. The angle is computed the way HF transformers does it, in f32
// (inv_freq = 1 / theta^(2i/d), angle = float(pos) * inv_freq), so long positions round
// exactly as the reference implementation does.
#pragma once

#include <cstdint>
#include <vector>

namespace moex {

class RopeTable {
 public:
  RopeTable(int64_t head_dim, float theta);
  // cos/sin of the head_dim/2 angles for `position` into cos_out/sin_out.
  void Angles(int64_t position, float* cos_out, float* sin_out) const;
  int64_t half() const { return static_cast<int64_t>(inv_freq_.size()); }

 private:
  std::vector<float> inv_freq_;
};

}  // namespace moex

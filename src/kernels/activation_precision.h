// How weights in GGML block formats meet their activations: in f32 (each weight widened to
// f32, the exact dot of the dequantised weights) or rounded to int8 per block, with
// integer dot products as llama.cpp computes them (kernels/int8_dot-inl.h), several times
// faster and about 0.5 % rms off per dot product (docs/kernels.md, "Activation
// precision"). Process-wide, like the thread count: set once at start, before any kernel
// runs. f32, f16 and bf16 weights always use f32 activations.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace moex::kernels {

enum class ActivationPrecision { kF32, kInt8 };

// The default is kInt8 (what block-quantized checkpoints are made for; see the docs).
void SetActivationPrecision(ActivationPrecision precision);
ActivationPrecision GetActivationPrecision();

// "f32" / "int8".
std::string_view ActivationPrecisionName(ActivationPrecision precision);
std::optional<ActivationPrecision> ParseActivationPrecision(std::string_view name);

// Sets a precision for a scope and restores the previous one (tests).
class ScopedActivationPrecision {
 public:
  explicit ScopedActivationPrecision(ActivationPrecision precision)
      : previous_(GetActivationPrecision()) {
    SetActivationPrecision(precision);
  }
  ~ScopedActivationPrecision() { SetActivationPrecision(previous_); }
  ScopedActivationPrecision(const ScopedActivationPrecision&) = delete;
  ScopedActivationPrecision& operator=(const ScopedActivationPrecision&) = delete;

 private:
  ActivationPrecision previous_;
};

}  // namespace moex::kernels

#include "kernels/activation_precision.h"

#include <atomic>

namespace moex::kernels {
namespace {
std::atomic<ActivationPrecision> g_precision{ActivationPrecision::kInt8};
}  // namespace

void SetActivationPrecision(ActivationPrecision precision) {
  g_precision.store(precision, std::memory_order_relaxed);
}

ActivationPrecision GetActivationPrecision() {
  return g_precision.load(std::memory_order_relaxed);
}

std::string_view ActivationPrecisionName(ActivationPrecision precision) {
  return precision == ActivationPrecision::kF32 ? "f32" : "int8";
}

std::optional<ActivationPrecision> ParseActivationPrecision(std::string_view name) {
  if (name == "f32") return ActivationPrecision::kF32;
  if (name == "int8") return ActivationPrecision::kInt8;
  return std::nullopt;
}

}  // namespace moex::kernels

#include "core/tensor.h"

namespace moex {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::vector<float> TensorToF32(const TensorView& tensor) {
  std::vector<float> out(static_cast<size_t>(tensor.numel()));
  ConvertToF32(tensor.data, tensor.dtype, tensor.numel(), out.data());
  return out;
}

}  // namespace moex

// A non-owning view of a weight tensor: dtype, row-major shape (outermost first, as in
// safetensors and PyTorch) and bytes. Views point into memory-mapped files or owned buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace moex {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  // Set by the model loader for q4_0 / q8_0 Linear weights: the same matrix regrouped eight
  // rows at a time (kernels/interleave.h), which the int8 Linear kernels read instead.
  const std::byte* interleaved = nullptr;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.empty() ? 1 : numel() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  // Bytes of one row (last dimension).
  size_t row_bytes() const { return DTypeBytes(dtype, cols()); }
  const std::byte* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes(); }
};

std::string ShapeString(const std::vector<int64_t>& shape);

// All of `tensor`'s elements widened to f32 (ConvertToF32): small tensors off the hot path,
// such as norms and router weights.
std::vector<float> TensorToF32(const TensorView& tensor);

}  // namespace moex

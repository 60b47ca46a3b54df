#include "model/expert_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/quantize.h"

namespace moex {

namespace {

// Q8_0 records: gate/up rows are already blocks along d; down column i gathers one element
// from each of d rows, each under its own block scale, so it is dequantised and
// requantised along d.
void PackQ8_0(const TensorView& gate, const TensorView& up, const TensorView& down,
              const ExpertShape& shape, std::byte* dst) {
  const int64_t d = shape.hidden_size;
  const int64_t f = shape.neurons;
  const size_t row = DTypeBytes(DType::kQ8_0, d);
  const size_t rec = shape.RecordBytes();
  for (int64_t i = 0; i < f; ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * rec, gate.data + static_cast<size_t>(i) * row, row);
    std::memcpy(dst + static_cast<size_t>(i) * rec + row, up.data + static_cast<size_t>(i) * row,
                row);
  }
  // One source block (32 neurons of one down row) at a time: each block's scale is read
  // once and the d rows are walked once per 32 neurons.
  const size_t down_row = DTypeBytes(DType::kQ8_0, f);
  std::vector<float> cols(static_cast<size_t>(kQ8BlockSize * d));  // [32 neurons][d]
  for (int64_t b = 0; b < f / kQ8BlockSize; ++b) {
    for (int64_t j = 0; j < d; ++j) {
      const std::byte* blk =
          down.data + static_cast<size_t>(j) * down_row + static_cast<size_t>(b) * kQ8BlockBytes;
      uint16_t scale_bits;
      std::memcpy(&scale_bits, blk, 2);
      const float scale = F16ToF32(scale_bits);
      // q * scale is exact in f32 (at most 8 + 11 significant bits): the value the kernels
      // and llama.cpp compute from this block.
      for (int k = 0; k < kQ8BlockSize; ++k)
        cols[static_cast<size_t>(k * d + j)] =
            static_cast<float>(static_cast<int8_t>(blk[2 + k])) * scale;
    }
    for (int k = 0; k < kQ8BlockSize; ++k) {
      const int64_t i = b * kQ8BlockSize + k;
      kernels::QuantizeQ8_0(&cols[static_cast<size_t>(k * d)], d,
                            dst + static_cast<size_t>(i) * rec + 2 * row);
    }
  }
}

}  // namespace

void CheckExpertTensors(const TensorView& gate, const TensorView& up, const TensorView& down,
                        const ExpertShape& shape) {
  const std::vector<int64_t> fd = {shape.neurons, shape.hidden_size};
  const std::vector<int64_t> df = {shape.hidden_size, shape.neurons};
  Check(gate.shape == fd, "expert tensor '", gate.name, "' has shape ", ShapeString(gate.shape),
        ", expected ", ShapeString(fd));
  Check(up.shape == fd, "expert tensor '", up.name, "' has shape ", ShapeString(up.shape),
        ", expected ", ShapeString(fd));
  Check(down.shape == df, "expert tensor '", down.name, "' has shape ", ShapeString(down.shape),
        ", expected ", ShapeString(df));
  for (const TensorView* t : {&gate, &up, &down}) {
    Check(t->dtype == shape.dtype, "expert tensor '", t->name, "' is ", DTypeName(t->dtype),
          " but the layer's experts are ", DTypeName(shape.dtype));
  }
  if (shape.dtype == DType::kQ8_0) {
    // Records hold gate row, up row and down column as Q8_0 blocks along d.
    Check(shape.hidden_size % kQ8BlockSize == 0, "q8_0 experts need hidden_size (d) to be a ",
          "multiple of 32 to be packed neuron-major, but d = ", shape.hidden_size, " (tensor '",
          gate.name, "')");
    Check(shape.neurons % kQ8BlockSize == 0, "q8_0 expert tensor '", down.name, "' has rows of ",
          shape.neurons, " neurons, which is not a multiple of 32 (q8_0 block size)");
  }
}

void PackExpertNeuronMajor(const TensorView& gate, const TensorView& up, const TensorView& down,
                           const ExpertShape& shape, std::byte* dst) {
  CheckExpertTensors(gate, up, down, shape);
  if (shape.dtype == DType::kQ8_0) {
    PackQ8_0(gate, up, down, shape, dst);
    return;
  }
  const int64_t d = shape.hidden_size;
  const int64_t f = shape.neurons;
  const size_t elem = DTypeBytes(shape.dtype, 1);
  const size_t row = elem * static_cast<size_t>(d);
  for (int64_t i = 0; i < f; ++i) {
    std::byte* rec = dst + static_cast<size_t>(i) * shape.RecordBytes();
    std::memcpy(rec, gate.data + static_cast<size_t>(i) * row, row);
    std::memcpy(rec + row, up.data + static_cast<size_t>(i) * row, row);
  }
  // Down column i is element (j, i) of the row-major [d, F] matrix. Transposing in blocks of
  // neurons reads each row segment once, instead of one element per cache line.
  constexpr int64_t kBlock = 64;
  for (int64_t i0 = 0; i0 < f; i0 += kBlock) {
    const int64_t i1 = std::min(f, i0 + kBlock);
    for (int64_t j = 0; j < d; ++j) {
      const std::byte* src = down.data + static_cast<size_t>(j * f + i0) * elem;
      for (int64_t i = i0; i < i1; ++i, src += elem) {
        std::byte* col = dst + static_cast<size_t>(i) * shape.RecordBytes() + 2 * row;
        std::memcpy(col + static_cast<size_t>(j) * elem, src, elem);
      }
    }
  }
}

}  // namespace moex

#include "model/expert_layout.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace moex {

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
    Check(t->dtype != DType::kQ8_0, "expert tensor '", t->name,
          "': q8_0 experts cannot be packed neuron-major without changing weights");
  }
}

void PackExpertNeuronMajor(const TensorView& gate, const TensorView& up, const TensorView& down,
                           const ExpertShape& shape, std::byte* dst) {
  CheckExpertTensors(gate, up, down, shape);
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

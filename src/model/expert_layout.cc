#include "model/expert_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace moex {

namespace {

// Block formats: record groups of G neurons, [G gate rows | G up rows | d down blocks].
void PackBlockGroups(const TensorView& gate, const TensorView& up, const TensorView& down,
                     const ExpertShape& shape, std::byte* dst) {
  const int64_t d = shape.hidden_size;
  const int64_t f = shape.neurons;
  const int64_t g = shape.GroupNeurons();
  const size_t row = DTypeBytes(shape.dtype, d);
  const size_t block = DTypeBytes(shape.dtype, g);  // One down block: G neurons of a row.
  const size_t down_row = DTypeBytes(shape.dtype, f);
  const size_t rows = static_cast<size_t>(g) * row;
  for (int64_t k = 0; k < f / g; ++k) {
    std::byte* out = dst + static_cast<size_t>(k) * (2 * rows + static_cast<size_t>(d) * block);
    std::memcpy(out, gate.data + static_cast<size_t>(k) * rows, rows);
    std::memcpy(out + rows, up.data + static_cast<size_t>(k) * rows, rows);
    std::byte* blocks = out + 2 * rows;
    for (int64_t j = 0; j < d; ++j)
      std::memcpy(blocks + static_cast<size_t>(j) * block,
                  down.data + static_cast<size_t>(j) * down_row + static_cast<size_t>(k) * block,
                  block);
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
  if (IsBlockQuantized(shape.dtype)) {
    // Gate/up rows are blocks along d; record groups take whole down blocks along F.
    const int64_t g = shape.GroupNeurons();
    const char* name = DTypeName(shape.dtype);
    Check(shape.hidden_size % g == 0, name, " experts need hidden_size (d) to be a multiple of ",
          g, " to be packed neuron-major, but d = ", shape.hidden_size, " (tensor '", gate.name,
          "')");
    Check(shape.neurons % g == 0, name, " expert tensor '", down.name, "' has rows of ",
          shape.neurons, " neurons, which is not a multiple of ", g, " (", name, " block size)");
    for (const TensorView* t : {&gate, &up, &down}) {
      Check(t->nbytes == DTypeBytes(shape.dtype, t->numel()), "expert tensor '", t->name,
            "' holds ", t->nbytes, " bytes, not the ", DTypeBytes(shape.dtype, t->numel()),
            " of ", t->numel(), " ", name, " weights");
    }
  }
}

void PackExpertNeuronMajor(const TensorView& gate, const TensorView& up, const TensorView& down,
                           const ExpertShape& shape, std::byte* dst) {
  CheckExpertTensors(gate, up, down, shape);
  if (IsBlockQuantized(shape.dtype)) {
    PackBlockGroups(gate, up, down, shape, dst);
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

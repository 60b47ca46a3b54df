// The neuron-major expert layout (docs/design.md, "The expert layout"): record i of an expert is
// [gate row i | up row i | down column i], each hidden_size elements of the expert's dtype.
// Any neuron range is one contiguous byte span and an independently computable partial
// expert, which is what splitting, chunked transfers and whole-expert caching all rest on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace moex {

struct ExpertShape {
  DType dtype = DType::kBF16;
  int64_t hidden_size = 0;  // d
  int64_t neurons = 0;      // F

  size_t RecordBytes() const { return 3 * DTypeBytes(dtype, hidden_size); }
  size_t ExpertBytes() const { return RecordBytes() * static_cast<size_t>(neurons); }
};

// Checks that gate [F, d], up [F, d] and down [d, F] agree with each other and with `shape`,
// and that their dtype can be packed; throws Error naming the tensor at fault.
void CheckExpertTensors(const TensorView& gate, const TensorView& up, const TensorView& down,
                        const ExpertShape& shape);

// Writes the expert's F records to dst (shape.ExpertBytes() bytes). F32/F16/BF16 and the
// Q8_0 gate/up rows are copied bit for bit. A Q8_0 down matrix [d, F] is quantised along F,
// so its column i is not a run of blocks: it is dequantised (exactly) and requantised as
// d/32 blocks along d with kernels::QuantizeQ8_0 -- the only case where packing changes
// weights (docs/expert-store.md gives the error). Q8_0 needs d and F multiples of 32.
void PackExpertNeuronMajor(const TensorView& gate, const TensorView& up, const TensorView& down,
                           const ExpertShape& shape, std::byte* dst);

}  // namespace moex

// The neuron-major expert layout (docs/design.md, "The expert layout"): record i of an expert is
// [gate row i | up row i | down column i], each hidden_size elements of the expert's dtype.
// Any neuron range is one contiguous byte span and an independently computable partial
// expert, which is what splitting, chunked transfers and whole-expert caching all rest on.
//
// Block formats (q8_0, q4_K, mxfp4, ...; docs/formats.md "Quantized expert records") keep
// the checkpoint's blocks bit for bit. Down [d, F] is blocked along F, so a column is not a
// run of blocks; instead a *record group* of G = block size neurons is the unit:
//   [gate rows of the G neurons | their up rows | d down blocks, block j = row j's block
//    covering the G neurons].
// A group takes G * RecordBytes() bytes, so a neuron range of whole groups still starts at
// neuron * RecordBytes() and is one contiguous span; ranges must be multiples of G.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace moex {

struct ExpertShape {
  DType dtype = DType::kBF16;
  int64_t hidden_size = 0;  // d
  int64_t neurons = 0;      // F

  // Bytes per neuron (for block formats the average over a record group).
  size_t RecordBytes() const { return 3 * DTypeBytes(dtype, hidden_size); }
  // Neurons per record group: the block size of a block format, else 1.
  int64_t GroupNeurons() const { return DTypeBlockElems(dtype); }
  size_t ExpertBytes() const { return RecordBytes() * static_cast<size_t>(neurons); }
};

// Checks that gate [F, d], up [F, d] and down [d, F] agree with each other and with `shape`,
// and that their dtype can be packed; throws Error naming the tensor at fault.
void CheckExpertTensors(const TensorView& gate, const TensorView& up, const TensorView& down,
                        const ExpertShape& shape);

// Writes the expert's F records (block formats: F / G record groups) to dst
// (shape.ExpertBytes() bytes). Every weight is copied bit for bit. Block formats need d and
// F to be multiples of the block size.
void PackExpertNeuronMajor(const TensorView& gate, const TensorView& up, const TensorView& down,
                           const ExpertShape& shape, std::byte* dst);

}  // namespace moex

// The neuron-major expert layout (docs/design.md, "The expert layout"): record i of an expert is
// [gate row i | up row i | down column i], each hidden_size elements of the expert's dtype.
// Any neuron range is one contiguous byte span and an independently computable partial
// expert, which is what splitting, chunked transfers and whole-expert caching all rest on.
//
// Block formats (q8_0, q4_K, mxfp4, ...; docs/formats.md "Quantized expert records") keep
// the checkpoint's blocks bit for bit. Down [d, F] is blocked along F, so a column is not a
// run of blocks; instead a *record group* of G neurons is the unit:
//   [gate rows of the G neurons | their up rows | d down runs, run j = row j's weights of
//    the G neurons (G / block size whole blocks)].
// G is the block size when one format encodes all three projections; gate/up and down may
// differ (llama.cpp's Q4_K_M: q4_K gate/up, q6_K down on some layers), and G is then the
// larger block size (block sizes are 32 and 256, so it is whole blocks of both).
// A group takes G * RecordBytes() bytes, so a neuron range of whole groups still starts at
// neuron * RecordBytes() and is one contiguous span; ranges must be multiples of G. When a
// model's MoE layers encode their experts differently, every layer's groups are padded to
// the widest layer's record size, so that the store, the host tier and the simulator keep
// one geometry for all layers (docs/expert-store.md, "Mixed-type experts").
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace moex {

struct ExpertShape {
  DType gate_up = DType::kBF16;  // Gate and up rows.
  DType down = DType::kBF16;     // The down projection.
  int64_t hidden_size = 0;       // d
  int64_t neurons = 0;           // F
  int64_t group_neurons = 0;     // 0: this encoding's own (NaturalGroupNeurons()).
  size_t record_bytes = 0;       // 0: this encoding's own; more when padded (above).

  static ExpertShape Uniform(DType dtype, int64_t d, int64_t f) { return {dtype, dtype, d, f}; }
  bool OneDType() const { return gate_up == down; }
  // Both projections in block formats (runs in kernels/quant_expert_ffn.cc).
  bool Blocked() const { return IsBlockQuantized(gate_up) || IsBlockQuantized(down); }
  // Neurons per record group: the larger block size (1 for f32/f16/bf16).
  int64_t NaturalGroupNeurons() const {
    return std::max<int64_t>(DTypeBlockElems(gate_up), DTypeBlockElems(down));
  }
  // Two gate/up rows and one neuron's share of the down runs, without padding.
  // (Written out, not ExpertEncoding's: layers built without the kernels use it too.)
  size_t NaturalRecordBytes() const {
    return 2 * DTypeBytes(gate_up, hidden_size) + DTypeBytes(down, hidden_size);
  }
  int64_t GroupNeurons() const { return group_neurons > 0 ? group_neurons : NaturalGroupNeurons(); }
  // Bytes per neuron (for block formats the average over a record group, padding included).
  size_t RecordBytes() const { return record_bytes > 0 ? record_bytes : NaturalRecordBytes(); }
  size_t ExpertBytes() const { return RecordBytes() * static_cast<size_t>(neurons); }
  kernels::ExpertEncoding Encoding() const {
    return {gate_up, down, GroupNeurons(), RecordBytes()};
  }
  // "q4_K", or "q4_K/q6_K" (gate-up/down) when they differ.
  std::string DTypeLabel() const;
};

// The shape all of a model's MoE layers share in the store: `layers` (one per MoE layer, same
// d and F) each with the largest group and record size among them. Throws Error when the
// layers cannot share one (a block format beside f32/f16/bf16, or different d or F).
std::vector<ExpertShape> PadToCommonShape(std::vector<ExpertShape> layers);

// Checks that gate [F, d], up [F, d] and down [d, F] agree with each other and with `shape`,
// and that their dtype can be packed; throws Error naming the tensor at fault.
void CheckExpertTensors(const TensorView& gate, const TensorView& up, const TensorView& down,
                        const ExpertShape& shape);

// Writes the expert's F records (block formats: F / G record groups) to dst
// (shape.ExpertBytes() bytes; padding is zeroed). Every weight is copied bit for bit. Block
// formats need d and F to be multiples of the group.
void PackExpertNeuronMajor(const TensorView& gate, const TensorView& up, const TensorView& down,
                           const ExpertShape& shape, std::byte* dst);

}  // namespace moex

#include "model/expert_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quant_format.h"

namespace moex {

namespace {

// Block formats: record groups of G neurons, [G gate rows | G up rows | d down runs of G].
void PackBlockGroups(const TensorView& gate, const TensorView& up, const TensorView& down,
                     const ExpertShape& shape, std::byte* dst) {
  const int64_t d = shape.hidden_size;
  const int64_t f = shape.neurons;
  const int64_t g = shape.GroupNeurons();
  const size_t row = DTypeBytes(shape.gate_up, d);
  const size_t run = DTypeBytes(shape.down, g);  // One down row's G neurons.
  const size_t down_row = DTypeBytes(shape.down, f);
  const size_t rows = static_cast<size_t>(g) * row;
  const size_t group_bytes = static_cast<size_t>(g) * shape.RecordBytes();
  const size_t used = 2 * rows + static_cast<size_t>(d) * run;
  for (int64_t k = 0; k < f / g; ++k) {
    std::byte* out = dst + static_cast<size_t>(k) * group_bytes;
    std::memcpy(out, gate.data + static_cast<size_t>(k) * rows, rows);
    std::memcpy(out + rows, up.data + static_cast<size_t>(k) * rows, rows);
    std::byte* runs = out + 2 * rows;
    for (int64_t j = 0; j < d; ++j)
      std::memcpy(runs + static_cast<size_t>(j) * run,
                  down.data + static_cast<size_t>(j) * down_row + static_cast<size_t>(k) * run,
                  run);
    std::memset(out + used, 0, group_bytes - used);
  }
}

}  // namespace

std::string ExpertShape::DTypeLabel() const {
  return OneDType() ? DTypeName(gate_up) : std::string(DTypeName(gate_up)) + "/" + DTypeName(down);
}

std::vector<ExpertShape> PadToCommonShape(std::vector<ExpertShape> layers) {
  if (layers.empty()) return layers;
  int64_t group = 1;
  size_t record = 0;
  for (const ExpertShape& s : layers) {
    Check(s.hidden_size == layers[0].hidden_size && s.neurons == layers[0].neurons,
          "routed experts of different shapes in one model");
    Check(s.Blocked() == layers[0].Blocked() && (s.Blocked() || s.OneDType()),
          "routed experts mix ", s.DTypeLabel(), " with ", layers[0].DTypeLabel(),
          ": a model's experts must be all block formats (any mix) or all one of f32/f16/bf16");
    group = std::max(group, s.NaturalGroupNeurons());
    record = std::max(record, s.NaturalRecordBytes());
  }
  for (ExpertShape& s : layers) {
    s.group_neurons = group;
    s.record_bytes = record;
  }
  return layers;
}

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
  for (const TensorView* t : {&gate, &up}) {
    Check(t->dtype == shape.gate_up, "expert tensor '", t->name, "' is ", DTypeName(t->dtype),
          " but the layer's expert gate/up projections are ", DTypeName(shape.gate_up));
  }
  Check(down.dtype == shape.down, "expert tensor '", down.name, "' is ", DTypeName(down.dtype),
        " but the layer's expert down projections are ", DTypeName(shape.down));
  const int64_t g = shape.GroupNeurons();
  if (shape.Blocked()) {
    // Gate/up rows are blocks along d; record groups take whole down blocks along F.
    Check(IsBlockQuantized(shape.gate_up) && IsBlockQuantized(shape.down), "expert tensors '",
          gate.name, "' (", DTypeName(shape.gate_up), ") and '", down.name, "' (",
          DTypeName(shape.down), ") mix a block format with a plain one");
    const std::string name = shape.DTypeLabel();
    // Gate/up rows of d weights are whole blocks, and so is d times a down run.
    const int64_t row_block = shape.NaturalGroupNeurons();
    Check(shape.hidden_size % row_block == 0, name,
          " experts need hidden_size (d) to be a multiple of ", row_block,
          " to be packed neuron-major, but d = ", shape.hidden_size, " (tensor '", gate.name, "')");
    Check(shape.neurons % g == 0, name, " expert tensor '", down.name, "' has rows of ",
          shape.neurons, " neurons, which is not a multiple of ", g, " (the record group)");
    for (const TensorView* t : {&gate, &up, &down}) {
      Check(t->nbytes == DTypeBytes(t->dtype, t->numel()), "expert tensor '", t->name, "' holds ",
            t->nbytes, " bytes, not the ", DTypeBytes(t->dtype, t->numel()), " of ", t->numel(),
            " ", DTypeName(t->dtype), " weights");
    }
    Check(g % shape.NaturalGroupNeurons() == 0 && shape.RecordBytes() >= shape.NaturalRecordBytes(),
          "expert shape ", name, ": groups of ", g, " neurons with ", shape.RecordBytes(),
          "-byte records cannot hold its blocks");
  } else {
    Check(shape.OneDType() && g == 1 && shape.RecordBytes() == shape.NaturalRecordBytes(),
          "expert shape ", shape.DTypeLabel(), " in groups of ", g,
          " is not a layout of f32/f16/bf16 records");
  }
}

namespace {

// A block format's scales must be finite (a NaN or infinite scale would decode to non-finite
// weights); the first bad block is named.
void CheckBlockScales(const TensorView& t) {
  const std::optional<QuantFormat> format = QuantFormatOf(t.dtype);
  if (!format) return;
  if (const auto bad =
          FindNonFiniteScale(*format, reinterpret_cast<const uint8_t*>(t.data), t.numel())) {
    Fail(QuantFormatName(*format), " expert tensor '", t.name, "' block ", *bad,
         " has a non-finite scale");
  }
}

}  // namespace

void PackExpertNeuronMajor(const TensorView& gate, const TensorView& up, const TensorView& down,
                           const ExpertShape& shape, std::byte* dst) {
  CheckExpertTensors(gate, up, down, shape);
  if (shape.Blocked()) {
    for (const TensorView* t : {&gate, &up, &down}) CheckBlockScales(*t);
    PackBlockGroups(gate, up, down, shape, dst);
    return;
  }
  const int64_t d = shape.hidden_size;
  const int64_t f = shape.neurons;
  const size_t elem = DTypeBytes(shape.gate_up, 1);
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

#include "io/gguf_writer.h"

#include <algorithm>

#include "core/error.h"
#include "core/tensor.h"
#include "io/gguf_format.h"

namespace moex {

namespace {

constexpr size_t kMaxTensorName = 63;  // GGML_MAX_NAME - 1.

void PutUInt(OutputFile& out, uint64_t v, size_t bytes) {
  uint8_t b[8];
  for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  out.Write(b, bytes);
}

void PutString(OutputFile& out, const std::string& s) {
  PutUInt(out, s.size(), 8);
  out.Write(s.data(), s.size());
}

void PutValue(OutputFile& out, const GgufValue& v) {
  PutUInt(out, static_cast<uint32_t>(v.type()), 4);
  if (v.type() == GgufType::kString) {
    PutString(out, v.AsString());
  } else if (v.is_array()) {
    PutUInt(out, static_cast<uint32_t>(v.array_type()), 4);
    PutUInt(out, v.array_size(), 8);
    if (v.array_type() == GgufType::kString) {
      for (const std::string& s : v.AsStringArray()) PutString(out, s);
    } else {
      out.Write(v.raw_array().data(), v.raw_array().size());
    }
  } else {
    PutUInt(out, v.scalar_bits(), GgufScalarBytes(v.type()));
  }
}

uint64_t AlignUp(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  Check(alignment > 0 && (alignment & (alignment - 1)) == 0, "GGUF alignment ", alignment,
        " is not a power of two");
  if (alignment != kGgufDefaultAlignment) Set(kGgufAlignmentKey, GgufValue::U32(alignment));
}

void GgufWriter::Set(const std::string& key, GgufValue value) {
  Check(!key.empty(), "GGUF: empty metadata key");
  if (key == kGgufAlignmentKey) {
    Check(value.type() == GgufType::kU32 && value.scalar_bits() == alignment_,
          "GGUF: general.alignment is set by the writer's constructor");
  }
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

const GgufValue* GgufWriter::Find(const std::string& key) const {
  for (const auto& [k, v] : metadata_)
    if (k == key) return &v;
  return nullptr;
}

void GgufWriter::Remove(const std::string& key) {
  std::erase_if(metadata_, [&](const auto& kv) { return kv.first == key; });
}

int64_t GgufWriter::CheckNew(const std::string& name, const std::vector<int64_t>& shape) const {
  Check(!name.empty() && name.size() <= kMaxTensorName, "GGUF: tensor name '", name,
        "' must have 1 to ", kMaxTensorName, " bytes");
  Check(!names_.contains(name), "GGUF: duplicate tensor '", name, "'");
  Check(shape.size() <= kGgufMaxDims, "GGUF: tensor '", name, "' has more than ", kGgufMaxDims,
        " dimensions");
  int64_t numel = 1;
  for (int64_t d : shape) {
    Check(d >= 0, "GGUF: tensor '", name, "' has a negative dimension in ", ShapeString(shape));
    numel *= d;
  }
  return numel;
}

void GgufWriter::AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                           ByteFill fill) {
  const int64_t numel = CheckNew(name, shape);
  if (IsBlockQuantized(dtype)) {
    Check(!shape.empty() && shape.back() % DTypeBlockElems(dtype) == 0, "GGUF: ",
          DTypeName(dtype), " tensor '", name, "' row length must be a multiple of ",
          DTypeBlockElems(dtype));
  }
  const int64_t cols = shape.empty() ? 1 : shape.back();
  names_[name] = tensors_.size();
  tensors_.push_back({name, GgmlTypeOf(dtype), shape, DTypeBytes(dtype, numel),
                      DTypeBytes(dtype, cols), std::move(fill)});
}

void GgufWriter::AddTensor(const std::string& name, QuantFormat format,
                           const std::vector<int64_t>& shape, ByteFill fill) {
  const int64_t numel = CheckNew(name, shape);
  const QuantFormatInfo& info = Info(format);
  Check(!shape.empty() && shape.back() % info.block_elems == 0, "GGUF: ", info.name, " tensor '",
        name, "' row length must be a multiple of ", info.block_elems);
  names_[name] = tensors_.size();
  tensors_.push_back({name, static_cast<uint32_t>(format), shape, QuantBytes(format, numel),
                      QuantBytes(format, shape.back()), std::move(fill)});
}

void GgufWriter::AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                           const void* data) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= std::max<int64_t>(d, 0);
  const size_t nbytes =
      numel % DTypeBlockElems(dtype) != 0 ? 0 : DTypeBytes(dtype, numel);
  AddTensor(name, dtype, shape, FillFromMemory(data, nbytes));
}

void GgufWriter::Write(const std::string& path) const {
  OutputFile out(path);
  PutUInt(out, kGgufMagic, 4);
  PutUInt(out, kGgufVersion, 4);
  PutUInt(out, tensors_.size(), 8);
  PutUInt(out, metadata_.size(), 8);
  for (const auto& [key, value] : metadata_) {
    PutString(out, key);
    PutValue(out, value);
  }
  uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    PutString(out, t.name);
    // GGML has no 0-d tensors: a scalar is written as ne = [1].
    const std::vector<int64_t> ne = t.shape.empty()
                                        ? std::vector<int64_t>{1}
                                        : std::vector<int64_t>(t.shape.rbegin(), t.shape.rend());
    PutUInt(out, ne.size(), 4);
    for (int64_t d : ne) PutUInt(out, static_cast<uint64_t>(d), 8);
    PutUInt(out, t.ggml_type, 4);
    PutUInt(out, offset, 8);
    offset = AlignUp(offset + t.nbytes, alignment_);
  }
  out.WriteZeros(AlignUp(out.bytes_written(), alignment_) - out.bytes_written());
  for (const Pending& t : tensors_) {
    out.WriteFilled(t.nbytes, t.row_bytes, t.fill);
    out.WriteZeros(AlignUp(t.nbytes, alignment_) - t.nbytes);
  }
  out.Commit();
}

}  // namespace moex

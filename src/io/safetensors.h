// Reader for the safetensors format: u64 little-endian header length, a JSON header that
// maps tensor names to {dtype, shape, data_offsets}, then the raw tensor bytes. Every field
// is validated against the file before a view is handed out.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "io/mapped_file.h"

namespace moex {

// Headers larger than this are rejected before parsing (the reference implementation uses
// the same limit), so a corrupt length field cannot trigger a huge allocation.
constexpr size_t kSafetensorsMaxHeaderBytes = 100u << 20;

// A U8 tensor: bytes, not weights (HF's packed MXFP4 blocks and E8M0 scales are U8). Kept
// apart from the weight tensors, so nothing reads them as numbers by mistake: only a reader
// that knows their packing (model/gpt_oss_weights.h) asks for them.
struct ByteTensor {
  std::string name;
  std::string dtype;  // "U8" (packed blocks) or "F8_E4M3" (FP8 weights, model/hf_fp8.h).
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates the file; throws Error naming the path and the problem.
  explicit SafetensorsFile(const std::string& path);
  // Validates bytes owned by the caller, which must outlive this object. `name` is used in
  // error messages.
  SafetensorsFile(std::span<const std::byte> bytes, const std::string& name);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Sorted by name. Views point into the mapping and live as long as this object.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* Find(const std::string& name) const;
  // The U8 tensors, sorted by name; not in tensors().
  const std::vector<ByteTensor>& byte_tensors() const { return byte_tensors_; }
  const ByteTensor* FindBytes(const std::string& name) const;
  // The optional "__metadata__" string map.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return name_; }
  // See WeightSource::Maps.
  bool Maps(const TensorView& tensor) const { return file_ && file_->Contains(tensor.data); }
  // See WeightSource::ReleasePages; only for views into this file's own mapping.
  bool ReleasePages(const TensorView& tensor) const {
    if (!file_ || !file_->Contains(tensor.data)) return false;
    file_->ReleasePages(tensor.data, tensor.nbytes);
    return true;
  }

 private:
  void Parse(std::span<const std::byte> bytes);

  std::string name_;
  std::optional<MappedFile> file_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<ByteTensor> byte_tensors_;
  std::unordered_map<std::string, size_t> byte_index_;
  std::map<std::string, std::string> metadata_;
};

// The safetensors dtype string ("F32", "F16", "BF16") for a dtype; throws for others (U8
// tensors are written as bytes: SafetensorsWriter::AddBytes).
const char* SafetensorsDTypeName(DType dtype);

}  // namespace moex

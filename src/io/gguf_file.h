// Reader for GGUF v2/v3 files: header, typed metadata, tensor infos and the data section.
// Every count, length and offset is checked against the file before use, so a malformed
// file gives an Error, never a crash or an allocation larger than the file itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/mutex.h"
#include "core/quant_format.h"
#include "core/tensor.h"
#include "io/gguf_value.h"
#include "io/mapped_file.h"

namespace moex {

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;
  std::vector<int64_t> ne;  // GGUF order: innermost (row length) first.
  uint64_t offset = 0;      // From the start of the data section.
  // Row-major shape (ne reversed), as TensorView uses.
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
};

class GgufFile {
 public:
  // Maps and validates the file; throws Error naming the path and the problem. The first
  // part of a split GGUF (llama.cpp's gguf-split: NAME-00001-of-0000N.gguf, split.count N)
  // opens the other parts beside it too: their tensors are found as the first part's, and a
  // missing or mismatched part is an Error naming it. Any other part is refused.
  explicit GgufFile(const std::string& path);
  // Validates caller-owned bytes that must outlive this object; `name` is for messages.
  GgufFile(std::span<const std::byte> bytes, const std::string& name);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return name_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // Offset of the data section from the start of the file.
  uint64_t data_offset() const { return data_offset_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  // See WeightSource::ReleasePages; ignores views that are not into this file's mapping.
  void ReleasePages(const TensorView& tensor) const {
    if (file_) file_->ReleasePages(tensor.data, tensor.nbytes);
    for (const auto& part : parts_) part->ReleasePages(tensor);
  }
  // See WeightSource::Maps.
  bool Maps(const TensorView& tensor) const {
    if (file_ && file_->Contains(tensor.data)) return true;
    for (const auto& part : parts_)
      if (part->Maps(tensor)) return true;
    return false;
  }
  // The files of a split GGUF (1 otherwise).
  size_t parts() const { return parts_.size() + 1; }
  const GgufValue* Find(const std::string& key) const;
  // Keys starting with `prefix` that no Find (nor a typed accessor) has asked for: what a
  // model reader can audit to never silently ignore a key.
  std::vector<std::string> KeysNotLookedUp(std::string_view prefix) const;
  // Throws Error "PATH: missing GGUF key KEY".
  const GgufValue& Get(const std::string& key) const;
  // Typed reads; a present key of the wrong type is an Error naming the key, an absent one
  // is an Error or gives the fallback.
  int64_t GetInt(const std::string& key) const;
  int64_t GetInt(const std::string& key, int64_t fallback) const;
  double GetFloat(const std::string& key) const;
  double GetFloat(const std::string& key, double fallback) const;
  bool GetBool(const std::string& key, bool fallback) const;
  std::string GetString(const std::string& key) const;
  std::string GetString(const std::string& key, const std::string& fallback) const;
  const std::vector<std::string>& GetStringArray(const std::string& key) const;
  std::vector<int64_t> GetIntArray(const std::string& key) const;
  std::vector<float> GetFloatArray(const std::string& key) const;

  // Tensors in file order (a split GGUF's parts in order), with types moex may not support.
  const std::vector<GgufTensorInfo>& tensor_infos() const {
    return parts_.empty() ? infos_ : all_infos_;
  }
  const GgufTensorInfo* FindTensorInfo(const std::string& name) const;
  // A view (row-major shape) of an F32/F16/BF16/Q8_0 tensor; null when absent. Throws
  // Error for a tensor of another GGML type ("unsupported GGML type q4_K ...").
  // Throws Error for a q8_0 or dequantised tensor with a non-finite block scale.
  const TensorView* FindTensor(const std::string& name) const;
  // As FindTensor, but a tensor of a block format other than q8_0 keeps its blocks: the view
  // has that format's DType (kQ4_K, ...) and points into the file. Weight matrices and
  // routed experts are read this way (kernels/quant_expert_ffn.cc). Throws Error for a
  // block with a non-finite scale, unless `check_scales` is false: routed experts are
  // checked where their bytes are copied (PackExpertNeuronMajor), so that opening a model
  // bigger than memory does not read all of it.
  const TensorView* FindQuantizedTensor(const std::string& name, bool check_scales = true) const;

 private:
  GgufFile(const std::string& path, bool open_parts);
  void Parse(std::span<const std::byte> bytes);
  void OpenParts();  // A split GGUF's other parts.
  // The part holding tensor `name` when this file does not (null if none does).
  const GgufFile* PartWith(const std::string& name) const;
  template <typename F>
  auto Typed(const std::string& key, F&& read) const;

  std::string name_;
  std::optional<MappedFile> file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> key_index_;
  mutable std::unique_ptr<std::atomic<bool>[]> looked_up_;  // [metadata index], set by Find.
  std::vector<GgufTensorInfo> infos_;
  std::unordered_map<std::string, size_t> tensor_index_;
  // views_[i] belongs to infos_[i]; data is null for unsupported types.
  mutable std::vector<TensorView> views_;  // Quantised ones get data on first FindTensor.
  // A split GGUF's parts 2..N, which tensors beyond this file's are looked up in, and every
  // part's tensor infos in order.
  std::vector<std::unique_ptr<GgufFile>> parts_;
  std::unordered_map<std::string, size_t> part_of_;  // Tensor name -> index in parts_.
  std::vector<GgufTensorInfo> all_infos_;
  // Tensors of GGML's block formats other than q8_0 (which the kernels read as stored) are
  // exposed by FindTensor as f32, dequantised on first use: llama.cpp's values exactly, at 4
  // bytes per weight; FindQuantizedTensor gives the blocks as stored.
  struct Quantized {
    QuantFormat format;
    const std::byte* blocks = nullptr;
    int64_t count = 0;
    TensorView raw;                // The blocks, with the format's DType.
    mutable bool checked = false;  // Scales checked finite (guarded by dequantize_mutex_).
  };
  void CheckScales(const std::string& name, const Quantized& q) const REQUIRES(dequantize_mutex_);
  const TensorView* FindTensor(const std::string& name, bool check_scales) const;
  mutable Mutex dequantize_mutex_;
  // [tensor]: q8_0 scales checked.
  mutable std::vector<bool> q8_checked_ GUARDED_BY(dequantize_mutex_);
  std::vector<std::optional<Quantized>> quantized_;  // [tensor]
  mutable std::vector<AlignedBuffer> dequantized_ GUARDED_BY(dequantize_mutex_);  // [tensor]
};

}  // namespace moex

// Streaming writer for safetensors files and sharded HF checkpoints. Tensors are declared
// first (the header must list every offset) and their bytes are produced on demand while
// writing, so checkpoints far larger than memory can be generated.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/output_file.h"

namespace moex {

class SafetensorsWriter {
 public:
  void SetMetadata(const std::string& key, const std::string& value);

  // Declares a tensor (F32, F16 or BF16) whose bytes `fill` produces at write time.
  // Throws Error for a duplicate or empty name, a negative dimension or another dtype.
  void Add(const std::string& name, DType dtype, const std::vector<int64_t>& shape, ByteFill fill);
  // Bytes from caller memory, which must stay valid until the write is done.
  void Add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
           const void* data);
  // Declares a tensor of one-byte elements: "U8" (packed blocks) or "F8_E4M3" (FP8
  // weights), as ByteTensor in io/safetensors.h. Throws Error for another dtype.
  void AddBytes(const std::string& name, const std::vector<int64_t>& shape, ByteFill fill,
                const char* dtype = "U8");
  // A copy of a view's tensor (e.g. from a WeightSource) under its own name.
  void Add(const TensorView& view) { Add(view.name, view.dtype, view.shape, view.data); }

  size_t num_tensors() const { return tensors_.size(); }
  uint64_t data_bytes() const;

  // Writes one safetensors file (temporary name, renamed on success).
  void WriteFile(const std::string& path) const;

  // Writes the weights of an HF checkpoint into the existing directory `dir`: a single
  // model.safetensors, or, when max_shard_bytes > 0 and the data exceeds it, shards
  // model-0000i-of-0000N.safetensors of at most max_shard_bytes of data each (a larger
  // tensor gets a shard of its own) plus model.safetensors.index.json. All files are
  // renamed into place only after every one was written; on failure none is left behind.
  void WriteCheckpoint(const std::string& dir, uint64_t max_shard_bytes = 0) const;

 private:
  struct Pending {
    std::string name;
    const char* dtype;  // Safetensors' name.
    std::vector<int64_t> shape;
    size_t nbytes;
    size_t row_bytes;  // Of the last dimension, the unit `fill` is asked for.
    ByteFill fill;
  };
  void AddPending(const std::string& name, const char* dtype, const std::vector<int64_t>& shape,
                  size_t elem_bytes_or_zero, DType elem_dtype, ByteFill fill);
  void WriteShard(OutputFile& out, const std::vector<const Pending*>& tensors) const;

  std::vector<Pending> tensors_;
  std::map<std::string, size_t> names_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace moex

// Streaming GGUF v3 writer: metadata of every type, then tensor infos, then aligned tensor
// data produced on demand (ByteFill), written to a temporary file and renamed on success.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/quant_format.h"
#include "io/gguf_value.h"
#include "io/output_file.h"

namespace moex {

class GgufWriter {
 public:
  // `alignment` (a power of two) applies to the data section and each tensor; values other
  // than 32 are recorded as general.alignment.
  explicit GgufWriter(uint32_t alignment = 32);

  // Adds or replaces a key (a replaced key keeps its position).
  void Set(const std::string& key, GgufValue value);
  const GgufValue* Find(const std::string& key) const;
  void Remove(const std::string& key);
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }

  // Declares a tensor by its row-major shape (written as GGUF ne, reversed); `fill`
  // produces its bytes at write time. Throws Error for a duplicate or overlong name (llama.cpp
  // allows 63 bytes), more than 4 dimensions, or a q8_0 row length not a multiple of 32.
  void AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                 ByteFill fill);
  // Bytes from caller memory, which must stay valid until Write() returns.
  void AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                 const void* data);
  // A tensor of one of GGML's block formats: `fill` produces QuantBytes(format, numel) bytes
  // of blocks, rows of whole blocks (the row length a multiple of the block size).
  void AddTensor(const std::string& name, QuantFormat format, const std::vector<int64_t>& shape,
                 ByteFill fill);
  size_t num_tensors() const { return tensors_.size(); }

  void Write(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    uint32_t ggml_type;
    std::vector<int64_t> shape;
    size_t nbytes;
    size_t row_bytes;  // Bytes of one row (the last dimension), the unit `fill` is asked for.
    ByteFill fill;
  };
  // Checks the name and shape; returns the element count.
  int64_t CheckNew(const std::string& name, const std::vector<int64_t>& shape) const;

  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Pending> tensors_;
  std::unordered_map<std::string, size_t> names_;
};

}  // namespace moex

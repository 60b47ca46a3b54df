// Where a model's tensors come from: an HF checkpoint (safetensors) or a GGUF file. Tensor
// names are the HF names ("model.layers.0.self_attn.q_proj.weight"); a GGUF source
// translates them. Views stay valid while the source lives.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace moex {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Null if absent.
  virtual const TensorView* Find(const std::string& name) const = 0;
  virtual std::vector<std::string> Names() const = 0;
  // A description for error messages (the path).
  virtual std::string Describe() const = 0;
  // The caller has copied what it needs of `tensor`: a file-mapped source drops its pages
  // from the resident set (views stay valid; reading them again faults the pages back in).
  // Sources that own their memory keep it, except a converted copy (FP8 weights,
  // model/hf_fp8.h), which is freed: the tensor must be found again before it is read.
  virtual void ReleasePages(const TensorView& tensor) const {}
  // Whether `tensor`'s bytes are in one of this source's file mappings (rather than memory
  // it owns, such as a converted copy): pages that ReleasePages can drop.
  virtual bool Maps(const TensorView& tensor) const { return false; }
  // Tensors of the file that this source maps to no name (a GGUF tensor moex does not
  // know), by their names in the file.
  virtual std::vector<std::string> Unmapped() const { return {}; }
  // A tensor's name in the file, for messages (a GGUF source's "blk.0.attn_q.weight").
  virtual std::string FileName(const std::string& name) const { return name; }

  // Throws Error "missing tensor NAME in PATH" when absent.
  const TensorView& Get(const std::string& name) const;
  // Also checks the shape; throws Error naming expected and actual shapes.
  const TensorView& Get(const std::string& name, const std::vector<int64_t>& shape) const;
};

}  // namespace moex

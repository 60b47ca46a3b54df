// MoE models stored as llama.cpp GGUF files. The engine only knows HF conventions, so this
// adapter translates both ways: ModelConfig <-> llama.cpp metadata keys, and HF tensor
// names <-> GGUF names, including the 3-D stacked expert tensors (expert e is one
// contiguous slice) and the Q/K row permutation llama.cpp applies for interleaved RoPE.
// Reading is in gguf_model_reader.cc, writing in gguf_model_writer.cc; the name mapping and
// row copies they share in gguf_tensor_map.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "io/gguf_file.h"
#include "io/weight_source.h"
#include "model/model_config.h"
#include "model/sampling_defaults.h"

namespace moex {

struct GgufModel {
  ModelConfig config;
  // The whole file, for tokenizer.ggml.* and other metadata. `weights` shares it.
  std::shared_ptr<const GgufFile> file;
  // Tensors under HF names and shapes; Q/K of "llama"/"deepseek" files are un-permuted
  // copies, everything else points into the mapping.
  std::unique_ptr<WeightSource> weights;
};

// Opens a GGUF model; throws Error for unsupported architectures or tensor types.
GgufModel OpenGgufModel(const std::string& path);

// llama.cpp's general.architecture for `arch` (Mixtral is "llama").
const char* GgufArchName(Arch arch);
// True when llama.cpp's converter permutes Q/K rows for this architecture (it uses
// interleaved "normal" RoPE for llama and deepseek, NeoX rotate-half for the others).
bool GgufPermutesQK(Arch arch);
// Whether llama.cpp renormalises the top-k routing weights, for the architectures whose
// graph fixes it (src/models/<arch>.cpp passes norm_w to build_moe_ffn; it reads
// expert_weights_norm only for deepseek2 and glm4moe). nullopt: read, or not a top-k softmax.
std::optional<bool> LlamaCppFixedTopKNorm(Arch arch);

// Hyper-parameters from llama.cpp metadata, completed from tensor shapes where the
// metadata has no key (tied embeddings, biases, MoE layer pattern).
ModelConfig ModelConfigFromGguf(const GgufFile& file);

// An HF-named WeightSource over a GGUF file.
std::unique_ptr<WeightSource> MakeGgufWeightSource(std::shared_ptr<const GgufFile> file,
                                                   const ModelConfig& config);

struct GgufWriteOptions {
  // Store 1-D tensors, norms and router weights as F32, as llama.cpp's converter does (its
  // CPU kernels expect that). Off keeps every tensor's dtype, for bit-exact round trips.
  bool f32_small_tensors = true;
  // Quantise weight matrices to this block format (q8_0, q4_K, mxfp4, ...), as llama.cpp's
  // `--outtype q8_0` or llama-quantize with one type: every matrix whose rows are a multiple
  // of the block, except norms and routers (kept f32), and all routed experts (an error if
  // their rows are not). Other matrices fall back to Q8_0, or F32 when their rows are not
  // a multiple of 32. Unset keeps the source dtypes.
  std::optional<DType> quantize;
  // With quantize = q4_K: llama-quantize's Q4_K_M mix, q6_K for the output matrix and for
  // attn_v and ffn_down (routed experts included) on the layers its use_more_bits picks.
  bool q4_k_m = false;
  std::string name = "moex";
  uint32_t alignment = 32;
  // The source's sampling defaults (its generation_config.json), written as llama.cpp's
  // general.sampling.* keys so the GGUF samples as the checkpoint did (docs/sampling.md).
  std::optional<SamplingDefaults> sampling;
};

// Writes `hf_weights` (HF names, e.g. an HfCheckpoint) as a GGUF llama.cpp can load:
// llama.cpp metadata from `config`, experts stacked per layer, Q/K permuted where llama.cpp
// expects it, and all tokenizer.* keys of `tokenizer` (may be null) with the token arrays
// padded (or trimmed of [PAD] entries) to config.vocab_size. Streams tensor data; throws
// Error for tensors it cannot map, missing experts or a vocabulary that does not fit.
void WriteGgufModel(const ModelConfig& config, const WeightSource& hf_weights,
                    const GgufFile* tokenizer, const std::string& out_path,
                    const GgufWriteOptions& options = {});

}  // namespace moex

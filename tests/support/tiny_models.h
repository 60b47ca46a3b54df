// Writes tiny random models of every architecture for tests (cached per test process).
#pragma once

#include <string>

#include "core/dtype.h"
#include "model/model_config.h"

namespace moex::testing {

// Path of a tiny random HF checkpoint of `arch` in `dtype` (written once per process).
std::string TinyModelPath(Arch arch, DType dtype = DType::kBF16, uint64_t seed = 7);

// The same tiny model with experts of kChunkedExpertNeurons neurons: in BF16 the expert
// store's block is 32 of them, so a cache with kChunkNeurons-neuron chunks holds parts of
// experts (partial residency, ranged prefetches).
constexpr int kChunkedExpertNeurons = 128;
constexpr int kChunkNeurons = 32;
std::string ChunkedTinyModelPath(Arch arch);

// A tiny OLMoE GGUF whose routed experts (and weight matrices) are stored in the block
// format `type` (q8_0, q4_K, mxfp4, ...; norms and router f32), written once per process.
// Widths are multiples of 256 (hidden 256, 512 neurons per expert) so every format fits,
// and each expert is two chunks of the expert store.
std::string TinyQuantModelPath(DType type);
// The same shape in three layers as llama-quantize's Q4_K_M mix: q4_K experts, with q6_K down
// projections on the last layer (use_more_bits), so one model mixes two record encodings.
std::string TinyQ4KMModelPath();

// Overwrites the f32 tensor `name` of a safetensors file with NaN (a model whose logits are
// not finite).
void PoisonTensorWithNaN(const std::string& file, const std::string& name);

}  // namespace moex::testing

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

// Overwrites the f32 tensor `name` of a safetensors file with NaN (a model whose logits are
// not finite).
void PoisonTensorWithNaN(const std::string& file, const std::string& name);

}  // namespace moex::testing

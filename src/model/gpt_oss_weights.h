// HF gpt-oss checkpoints store each layer's routed experts fused, in the orientation of
// `x @ W`:
//   mlp.experts.gate_up_proj      [E, d, 2F]  gate = even columns, up = odd columns,
//   mlp.experts.gate_up_proj_bias [E, 2F]     interleaved the same way,
//   mlp.experts.down_proj         [E, F, d],
//   mlp.experts.down_proj_bias    [E, d].
// moex reads routed experts one at a time as HF Linear matrices (model.h: gate/up [F, d],
// down [d, F]) and their biases per layer, under TensorNames' names. This source presents
// the fused tensors that way: per-expert copies, de-interleaved and transposed in the
// stored dtype on first use (owned for the source's lifetime), and the biases split into
// gate [E, F] and up [E, F] (down's is renamed only). Every other name, the fused ones
// included, passes through to the checkpoint.
#pragma once

#include <memory>

#include "io/weight_source.h"
#include "model/model_config.h"

namespace moex {

// Throws Error naming the tensor when a fused tensor has the wrong shape or a block dtype.
std::unique_ptr<WeightSource> WrapGptOssHfWeights(std::unique_ptr<WeightSource> hf,
                                                  const ModelConfig& config);

}  // namespace moex

// HF gpt-oss checkpoints store each layer's routed experts fused, in the orientation of
// `x @ W`:
//   mlp.experts.gate_up_proj      [E, d, 2F]  gate = even columns, up = odd columns,
//   mlp.experts.gate_up_proj_bias [E, 2F]     interleaved the same way,
//   mlp.experts.down_proj         [E, F, d],
//   mlp.experts.down_proj_bias    [E, d].
// The published checkpoints (openai/gpt-oss-20b/120b) store the expert matrices in MXFP4
// instead (config.json's quantization_config, model/hf_quantization.h), as U8 tensors in the
// orientation of HF Linear weights, gate and up rows interleaved the same way:
//   mlp.experts.gate_up_proj_blocks [E, 2F, d/32, 16], ..._scales [E, 2F, d/32],
//   mlp.experts.down_proj_blocks    [E, d, F/32, 16],  ..._scales [E, d, F/32]
// (model/hf_mxfp4.h has the packing); the biases stay as above.
// moex reads routed experts one at a time as HF Linear matrices (model.h: gate/up [F, d],
// down [d, F]) and their biases per layer, under TensorNames' names. This source presents
// the fused tensors that way: per-expert copies, de-interleaved and transposed in the
// stored dtype on first use (owned for the source's lifetime; MXFP4 becomes DType::kMXFP4
// blocks, repacked without changing a code or exponent), and the biases split into
// gate [E, F] and up [E, F] (down's is renamed only). Every other name, the fused ones
// included, passes through to the checkpoint.
#pragma once

#include <memory>

#include "io/weight_source.h"
#include "model/hf_checkpoint.h"
#include "model/model_config.h"

namespace moex {

// Throws Error naming the tensor when a fused tensor has the wrong shape or a block dtype,
// a _blocks tensor lacks its _scales (or the reverse), an exponent is 0xFF (NaN), or the
// tensors disagree with quantization_config (MXFP4 without it, or in a layer whose experts
// modules_to_not_convert covers; unquantised experts in a layer it does not cover), and for
// any other U8 tensor.
std::unique_ptr<WeightSource> WrapGptOssHfWeights(std::unique_ptr<HfCheckpoint> hf,
                                                  const ModelConfig& config);

}  // namespace moex

// Block-scaled FP8 weights (config.json's quantization_config with quant_method "fp8",
// model/hf_quantization.h), as DeepSeek-V3/R1, MiniMax-M2 and Qwen3.5 publish them: a
// Linear weight X.weight is an F8_E4M3 tensor [rows, cols] (e4m3fn: 1 sign, 4 exponent bits
// of bias 7, 3 mantissa bits, no infinities, S.1111.111 NaN, largest 448) beside
// X.weight_scale_inv [ceil(rows / br), ceil(cols / bc)] (f32 or bf16) for weight_block_size
// [br, bc], and the weight is e4m3(code) * scale_inv of its block. Modules listed in
// modules_to_not_convert (the router, the embeddings, the LM head, norms) stay bf16.
//
// moex runs such a checkpoint dequantized, as DeepSeek's fp8_cast_bf16.py and llama.cpp's
// converter do: each FP8 weight becomes bf16 (the product taken in f32, rounded to nearest
// even) on first use; activations are not quantized to FP8. A copy is freed when the model
// has copied it (WeightSource::ReleasePages), so packing an offloaded model converts one
// layer at a time instead of holding every converted expert.
#pragma once

#include <cstdint>
#include <memory>

#include "io/weight_source.h"
#include "model/hf_checkpoint.h"

namespace moex {

// The value of an e4m3fn code (NaN for 0x7F and 0xFF).
float Fp8E4M3ToFloat(uint8_t code);
// The nearest e4m3fn code to `x`, ties to even, saturating at +-448; NaN becomes 0x7F.
uint8_t FloatToFp8E4M3(float x);

// `hf` with every F8_E4M3 weight presented as a bf16 tensor of the same name and its
// weight_scale_inv consumed. Throws Error naming the tensor for an FP8 weight that is not
// 2-D, has no weight_scale_inv or one of the wrong shape or dtype, is also stored
// unquantized, or a weight_scale_inv without its FP8 weight.
// REQUIRES: hf->quantization() is fp8.
std::unique_ptr<WeightSource> WrapFp8HfWeights(std::unique_ptr<HfCheckpoint> hf);

}  // namespace moex

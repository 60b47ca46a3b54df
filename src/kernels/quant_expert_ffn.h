// Routed experts in GGML block formats (kernels/quant_expert_ffn.cc). ExpertFfn (ops.h)
// sends block-format jobs here; tests and benchmarks also call these directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace moex {
class ThreadPool;
}

namespace moex::kernels {

// ExpertFfn on record groups (model/expert_layout.h): every job's records start at a group
// and its neuron_count is a multiple of the group; d_model is a multiple of both block sizes.
// Gate/up and down may be different block formats.
void QuantExpertFfn(std::span<const ExpertJob> jobs, const ExpertEncoding& encoding,
                    int64_t d_model, ThreadPool& pool, const ExpertActivation& act = {});

// Linear (ops.h) with f32 activations for one output whose weights are in a block format
// other than q8_0: each row's dot with each token through the same block dot products as
// the expert kernels (batch and thread invariant). `in` is a multiple of the block size.
// With int8 activations Linear uses QuantLinearMultiInt8 instead.
void QuantLinear(const LinearOutput& o, const float* x, int64_t n, ThreadPool& pool);

// Several block-format outputs of one input x with int8 activations (the q, k and v of a
// quantized GGUF): x rounded once, all rows in one parallel region; the same bits as one
// QuantLinear per output. Formats without an int8 kernel run with f32 activations.
void QuantLinearMultiInt8(std::span<const LinearOutput> outs, const float* x, int64_t n,
                          ThreadPool& pool);

// With ActivationPrecision::kInt8 (kernels/activation_precision.h), the activations that
// meet weights of `dtype` are rounded to int8 in blocks of this many values (256 for the
// 256-weight formats, 32 for the others); 0 for a dtype without an integer kernel (every
// non-block dtype), which keeps f32 activations.
int64_t Int8ActivationBlock(DType dtype);

// The run-time target's int8 activation rounding of k values (a multiple of `block`, 32 or
// 256): per block, d = max|x| / 127 and q = round-half-even(x * (127 / max|x|)) in f32 (all
// zero for an all-zero block), and the sums of q per 16 in s. For tests: the kernels
// quantise their inputs this way.
void QuantizeActivationsInt8(const float* x, int64_t k, int64_t block, int8_t* q, float* d,
                             int16_t* s);

// The run-time target's block decoder: `count` weights (whole blocks) to f32. Gives exactly
// core Dequantize's floats (tested), so the kernels compute on llama.cpp's values.
void DecodeQuantBlocks(DType dtype, const std::byte* blocks, int64_t count, float* out);

}  // namespace moex::kernels

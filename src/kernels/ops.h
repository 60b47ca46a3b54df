// CPU kernels used by the forward pass. Activations are f32; weights may be f32, f16, bf16
// or any GGML block format (q8_0, q4_K, mxfp4, ...; quant_expert_ffn.h). Block formats meet
// activations rounded to int8 (integer dot products) or in f32 (weights widened to f32 in
// registers), as kernels/activation_precision.h says; everything else is f32 throughout.
//
// Determinism contract (the lossless guarantee rests on it):
//  * Batch invariance: row t of every output is bit-identical whatever the number of rows
//    n, the thread count, and the SIMD work split, within one process.
//  * Expert chunking: ExpertFfn over neuron range [a, c) gives the same bits as running
//    [a, b) then [b, c) into the same accumulator (the down projection is a sequential
//    fused multiply-add chain over neurons for every output element).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace moex {
class ThreadPool;
}

namespace moex::kernels {

// The SIMD target chosen at run time ("AVX3_DL" = AVX-512 with VNNI, "AVX3" = AVX-512,
// "AVX2"), for reports.
std::string SimdTargetName();
// Highway target bits (HWY_AVX3, ...) compiled into the kernels and supported by this CPU,
// best first. Tests pin each in turn with hwy::SetSupportedTargetsForTest.
std::vector<int64_t> AvailableSimdTargets();

// Every parallel kernel has an overload taking the pool explicitly (tests use it to check
// thread-count invariance); the short forms use ThreadPool::Global().

// y[t, o] = dot(w[o, :], x[t, :]) + bias[o], t < n, o < out. w: [out, in] row-major.
// x: [n, in] f32, y: [n, out] f32, bias may be null. Parallel over the global thread pool.
void Linear(const std::byte* w, DType dtype, int64_t out, int64_t in, const float* x, int64_t n,
            float* y, const float* bias = nullptr);
void Linear(const std::byte* w, DType dtype, int64_t out, int64_t in, const float* x, int64_t n,
            float* y, const float* bias, ThreadPool& pool);

// One of several Linear outputs computed from the same input x (e.g. q, k and v).
struct LinearOutput {
  const std::byte* w = nullptr;
  DType dtype = DType::kF32;
  int64_t out = 0;
  int64_t in = 0;  // The same for every output of one call.
  float* y = nullptr;
  const float* bias = nullptr;
  // w regrouped for the int8 kernels (TensorView::interleaved), or null.
  const std::byte* interleaved = nullptr;
  // y = scale * (x W^T) + bias: llama.cpp's per-matrix `.scale` tensor (docs/formats.md), 1
  // when the file has none.
  float scale = 1.0f;
};
inline LinearOutput OutputOf(const TensorView& w, float* y, const float* bias = nullptr,
                             float scale = 1.0f) {
  return {w.data, w.dtype, w.rows(), w.cols(), y, bias, w.interleaved, scale};
}
// The same bits as one Linear per output, in one parallel region instead of several.
void LinearMulti(std::span<const LinearOutput> outs, const float* x, int64_t n);
void LinearMulti(std::span<const LinearOutput> outs, const float* x, int64_t n, ThreadPool& pool);
inline void Linear(const TensorView& w, const float* x, int64_t n, float* y,
                   const float* bias = nullptr, float scale = 1.0f) {
  const LinearOutput o = OutputOf(w, y, bias, scale);
  LinearMulti(std::span<const LinearOutput>(&o, 1), x, n);
}

// One unit of routed-expert work on the neuron-major layout (see docs/expert-store.md):
// record i (of d_model*3 elements) = [gate row i | up row i | down column i], each part
// DTypeBytes(dtype, d_model) bytes. Block formats (q8_0, q4_K, mxfp4, ...) use record
// groups of whole blocks instead (model/expert_layout.h) and run in quant_expert_ffn.cc:
// their jobs start at a group and cover whole groups.
// For each token t < n:  h_i = silu(dot(gate_i, x_t)) * dot(up_i, x_t)
//                        y_t += sum over i in [0, neuron_count) of h_i * down_i (in order)
// With biases (gpt-oss), gate_i . x_t + gate_bias[i] and up_i . x_t + up_bias[i] enter the
// activation (per neuron, so chunks stay independent); the down bias is the caller's.
struct ExpertJob {
  const std::byte* records = nullptr;  // First record of the range.
  int64_t neuron_count = 0;
  const float* x = nullptr;  // [n, d_model] inputs (tokens routed to this expert).
  int64_t n = 0;
  float* y = nullptr;  // [n, d_model] accumulator, updated in place.
  const float* gate_bias = nullptr;  // [neuron_count] for the range's neurons, or null.
  const float* up_bias = nullptr;    // The same for up (both set or both null).
  // The expert's gate and up outputs are multiplied by these before the biases and the
  // activation (llama.cpp's per-expert `.scale` tensors); 1 without them.
  float gate_scale = 1.0f, up_scale = 1.0f;
};
// The gated activation h = act(g, u) of routed experts: SwiGLU silu(g) * u (limit 0), or
// gpt-oss's clamped form (u' + 1) * g' * sigmoid(alpha g') with g' = min(g, limit) and
// u' = clamp(u, -limit, limit). Element-wise, so it keeps every invariance above.
struct ExpertActivation {
  float limit = 0.0f;
  float alpha = 1.702f;
};
// How one layer's expert records are encoded (model/expert_layout.h): gate and up rows in
// one dtype, the down projection in another (llama.cpp's Q4_K_M mixes q4_K gate/up with
// q6_K down), in record groups of `group_neurons` (1 for f32/f16/bf16) taking `record_bytes`
// per neuron: the natural size, or more when a model whose layers differ pads every layer's
// groups to its widest layer's.
struct ExpertEncoding {
  DType gate_up = DType::kBF16;
  DType down = DType::kBF16;
  int64_t group_neurons = 1;
  size_t record_bytes = 0;
  // One dtype for all three projections, records of their natural size.
  static ExpertEncoding Uniform(DType dtype, int64_t d_model);
  // 2 gate/up rows and the down run of one neuron (without padding).
  size_t NaturalRecordBytes(int64_t d_model) const;
};
// Runs independent jobs (distinct y) across the thread pool. Results do not depend on how
// the work is scheduled.
// Block formats need d_model and neuron_count to be multiples of the record group.
void ExpertFfn(std::span<const ExpertJob> jobs, const ExpertEncoding& encoding, int64_t d_model,
               ThreadPool& pool, const ExpertActivation& act = {});
void ExpertFfn(std::span<const ExpertJob> jobs, DType dtype, int64_t d_model,
               const ExpertActivation& act = {});
void ExpertFfn(std::span<const ExpertJob> jobs, DType dtype, int64_t d_model, ThreadPool& pool,
               const ExpertActivation& act = {});
// Bytes of one neuron record.
inline size_t ExpertRecordBytes(DType dtype, int64_t d_model) {
  return 3 * DTypeBytes(dtype, d_model);
}

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight, t < n. out may alias x.
void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out);

// out[t, :] = (x[t, :] - mean) / sqrt(var + eps) * weight + bias, t < n, with mean and the
// (biased) variance of row t computed in f32 in two passes, as torch's nn.LayerNorm.
// out may alias x.
void LayerNorm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim,
               float eps, float* out);

// Rotary embedding, NeoX / HF "rotate_half" convention, in place on x: [n_heads, head_dim]
// for one token. cos/sin: [head_dim / 2] for this token's position.
void RopeNeox(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin);

// In place softmax over x[0, n).
void Softmax(float* x, int64_t n);

// gate[i] = silu(gate[i]) * up[i], i < n.
void SiluMul(float* gate, const float* up, int64_t n);

// What some architectures add to causal attention (gpt-oss): per-head sink logits that join
// each softmax's max and denominator without a value (HF: softmax over [scores, sink], the
// sink column dropped), and a sliding window: a query at position p attends keys
// (p - window, p] only (0: every earlier key).
struct AttentionExtras {
  const float* sinks = nullptr;  // [n_heads], or null.
  int64_t window = 0;
  // > 0: query i attends only to keys in its chunk, positions from (pos0 + i) rounded down
  // to a multiple of chunk (Llama 4's chunked attention); with a window, the later start wins.
  int64_t chunk = 0;
};

// Causal grouped-query attention for one sequence.
// q: [n_q, n_heads, head_dim]; query i sits at position pos0 + i and attends keys 0..pos0+i.
// k, v: [n_ctx >= pos0 + n_q, n_kv_heads, head_dim] f32 caches; head h reads kv head
// h / (n_heads / n_kv_heads). out: [n_q, n_heads, head_dim]. Parallel over heads x queries.
void Attention(const float* q, int64_t n_q, int64_t pos0, const float* k, const float* v,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out,
               const AttentionExtras& extras = {});
void Attention(const float* q, int64_t n_q, int64_t pos0, const float* k, const float* v,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out,
               ThreadPool& pool, const AttentionExtras& extras = {});

// Converts n elements of any dtype to f32 (for embeddings and norm weights).
void ToF32(const std::byte* src, DType dtype, int64_t n, float* dst);

}  // namespace moex::kernels

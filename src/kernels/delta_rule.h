// Gated DeltaNet's sequence mixing (Qwen3-Next's linear attention, ModelConfig::GatedDeltaNet):
// the causal depthwise convolution and the gated delta rule, one sequence at a time. Both
// give the same bits however a sequence is split into calls (a whole prompt, chunks of it,
// one token at a time), as every other kernel of the forward pass does.
#pragma once

#include <cstdint>

namespace moex::kernels {

// Causal depthwise convolution of `kernel` taps with SiLU, over n tokens of `channels`:
// out[t, c] = silu(sum_j w[c, j] * x[t - (kernel - 1) + j, c]), inputs before the first token
// read from `window` ([kernel - 1, channels], oldest first), which is then replaced by the
// last kernel - 1 inputs (of the window and x together). x and out are [n, channels] with row
// strides; w is [channels, kernel]. out must not alias x.
void CausalConvSilu(const float* x, int64_t x_stride, int64_t n, int64_t channels, const float* w,
                    int64_t kernel, float* window, float* out, int64_t out_stride);

// The chunk of the gated delta rule: chunks start at multiples of it from the sequence's
// first token (HF's and fla's chunked kernels use 64).
constexpr int64_t kDeltaRuleChunk = 64;

// One head's state between calls: S at the start of the current chunk, and what the chunk's
// tokens so far (`filled` of them, < kDeltaRuleChunk) add to it.
struct DeltaRuleState {
  float* S = nullptr;  // [dk, dv]
  float* k = nullptr;  // [kDeltaRuleChunk, dk]: the chunk's keys so far.
  float* u = nullptr;  // [kDeltaRuleChunk, dv]: their values written to the state.
  float* G = nullptr;  // [kDeltaRuleChunk]: their decays summed from the chunk's start.
  // Floats of each part, for callers that lay them out.
  static int64_t Floats(int64_t dk, int64_t dv) {
    return dk * dv + kDeltaRuleChunk * (dk + dv + 1);
  }
  // The parts of a block of Floats(dk, dv) floats.
  static DeltaRuleState In(float* block, int64_t dk, int64_t dv) {
    return {block, block + dk * dv, block + dk * dv + kDeltaRuleChunk * dk,
            block + dk * dv + kDeltaRuleChunk * (dk + dv)};
  }
};

// The gated delta rule of one head over n tokens continuing `state`, whose chunk holds
// `filled` tokens (the sequence's length before these, modulo kDeltaRuleChunk). For each
// token t in order it computes, as the recurrence
//   S <- exp(g_t) S;  S <- S + k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t
// would, in the chunked (WY) form: with S0 the state at the chunk's start and G_t the decay
// summed over the chunk up to t,
//   u_t = beta_t (v_t - e^{G_t} S0^T k_t) - sum_{s<t} beta_t e^{G_t - G_s} (k_t . k_s) u_s
//   o_t = e^{G_t} S0^T q_t + sum_{s<=t} e^{G_t - G_s} (q_t . k_s) u_s
// and, when the chunk is full, S = e^{G_last} S0 + sum_s e^{G_last - G_s} k_s u_s^T. So S is
// read once per chunk of a call and written once per chunk, and each token's arithmetic
// depends only on S0 and the chunk's earlier tokens: any split of a sequence into calls gives
// the same bits. Every exponent is a decay (<= 0). q and k are used as given (the caller
// normalises and scales them). q_t, k_t (dk values) start at q + t * qk_stride,
// k + t * qk_stride; v_t and o_t (dv values) at v + t * v_stride, out + t * out_stride; g_t
// and beta_t at g[t * gb_stride], beta[t * gb_stride].
void GatedDeltaRule(const float* q, const float* k, int64_t qk_stride, const float* v,
                    int64_t v_stride, const float* g, const float* beta, int64_t gb_stride,
                    int64_t n, int64_t dk, int64_t dv, const DeltaRuleState& state, int64_t filled,
                    float* out, int64_t out_stride);

}  // namespace moex::kernels

#include "kernels/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace moex::kernels {

void CausalConvSilu(const float* x, int64_t x_stride, int64_t n, int64_t channels, const float* w,
                    int64_t kernel, float* window, float* out, int64_t out_stride) {
  const int64_t past = kernel - 1;
  // Input j of the extended sequence (window, then x): j < past is in the window.
  auto input = [&](int64_t j) -> const float* {
    return j < past ? window + j * channels : x + (j - past) * x_stride;
  };
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * out_stride;
    for (int64_t c = 0; c < channels; ++c) o[c] = 0.0f;
    for (int64_t j = 0; j < kernel; ++j) {
      const float* in = input(t + j);  // Tap j reads extended input t + j.
      for (int64_t c = 0; c < channels; ++c) o[c] += w[c * kernel + j] * in[c];
    }
    for (int64_t c = 0; c < channels; ++c) o[c] = o[c] / (1.0f + std::exp(-o[c]));
  }
  // The new window: the last `past` extended inputs, copied forward (oldest first) so that a
  // window row is overwritten only after it was read.
  for (int64_t i = 0; i < past; ++i) {
    const float* src = input(n + i);
    float* dst = window + i * channels;
    if (src != dst)
      for (int64_t c = 0; c < channels; ++c) dst[c] = src[c];
  }
}

void GatedDeltaRule(const float* q, const float* k, int64_t qk_stride, const float* v,
                    int64_t v_stride, const float* g, const float* beta, int64_t gb_stride,
                    int64_t n, int64_t dk, int64_t dv, const DeltaRuleState& state, int64_t filled,
                    float* out, int64_t out_stride) {
  constexpr int64_t C = kDeltaRuleChunk;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(2 * C * dv));
  float* qS = scratch.data();  // [segment, dv]: S0^T q_t.
  float* o = qS + C * dv;      // [segment, dv]
  float* S = state.S;
  // Segments: the tokens of this call within one chunk.
  for (int64_t t0 = 0; t0 < n;) {
    const int64_t first = filled, m = std::min(C - filled, n - t0);
    // The segment's G (continuing the chunk's sum), keys, and S0^T k (into u) / S0^T q in one
    // pass over S0's rows; per token the sums run over the rows in the same order always.
    for (int64_t t = 0; t < m; ++t) {
      const int64_t i = first + t;
      state.G[i] = (i == 0 ? 0.0f : state.G[i - 1]) + g[(t0 + t) * gb_stride];
      std::memcpy(state.k + i * dk, k + (t0 + t) * qk_stride, sizeof(float) * dk);
    }
    std::fill(state.u + first * dv, state.u + (first + m) * dv, 0.0f);
    std::fill(qS, qS + m * dv, 0.0f);
    // A few tokens at a time, so that their sums stay in L1 while S's rows stream by.
    constexpr int64_t kTile = 4;
    for (int64_t b = 0; b < m; b += kTile) {
      const int64_t e = std::min(m, b + kTile);
      for (int64_t r = 0; r < dk; ++r) {
        const float* row = S + r * dv;
        for (int64_t t = b; t < e; ++t) {
          const float kt = state.k[(first + t) * dk + r], qt = q[(t0 + t) * qk_stride + r];
          float* ks = state.u + (first + t) * dv;
          float* qs = qS + t * dv;
          for (int64_t j = 0; j < dv; ++j) {
            ks[j] += kt * row[j];
            qs[j] += qt * row[j];
          }
        }
      }
    }
    for (int64_t t = 0; t < m; ++t) {
      const int64_t i = first + t;
      const float* kt = state.k + i * dk;
      const float* qt = q + (t0 + t) * qk_stride;
      const float* vt = v + (t0 + t) * v_stride;
      const float bt = beta[(t0 + t) * gb_stride], et = std::exp(state.G[i]);
      float* u = state.u + i * dv;
      float* ot = o + t * dv;
      for (int64_t j = 0; j < dv; ++j) {
        u[j] = bt * (vt[j] - et * u[j]);
        ot[j] = et * qS[t * dv + j];
      }
      for (int64_t s = 0; s < i; ++s) {  // The chunk's earlier tokens, this call's or not.
        const float* ks = state.k + s * dk;
        float kk = 0.0f, qk = 0.0f;
        for (int64_t r = 0; r < dk; ++r) {
          kk += kt[r] * ks[r];
          qk += qt[r] * ks[r];
        }
        const float decay = std::exp(state.G[i] - state.G[s]);
        const float a = bt * decay * kk, b = decay * qk;
        const float* us = state.u + s * dv;
        for (int64_t j = 0; j < dv; ++j) {
          u[j] -= a * us[j];
          ot[j] += b * us[j];
        }
      }
      float qk = 0.0f;  // s = t: the token's own update.
      for (int64_t r = 0; r < dk; ++r) qk += qt[r] * kt[r];
      float* dst = out + (t0 + t) * out_stride;
      for (int64_t j = 0; j < dv; ++j) dst[j] = ot[j] + qk * u[j];
    }
    filled += m;
    t0 += m;
    if (filled < C) break;  // The chunk goes on in a later call.
    // The chunk is full: fold it into S.
    float tail[C];
    const float last = state.G[C - 1], em = std::exp(last);
    for (int64_t s = 0; s < C; ++s) tail[s] = std::exp(last - state.G[s]);
    for (int64_t r = 0; r < dk; ++r) {
      float* row = S + r * dv;
      for (int64_t j = 0; j < dv; ++j) row[j] *= em;
      for (int64_t s = 0; s < C; ++s) {
        const float f = tail[s] * state.k[s * dk + r];
        const float* us = state.u + s * dv;
        for (int64_t j = 0; j < dv; ++j) row[j] += f * us[j];
      }
    }
    filled = 0;
  }
}

}  // namespace moex::kernels

#include "policy/common/mlp_training.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>

namespace moex::policy {

void Gemm(bool a_transposed, bool b_transposed, int m, int n, int k, const float* a, const float* b,
          float* c, bool accumulate) {
  cblas_sgemm(CblasRowMajor, a_transposed ? CblasTrans : CblasNoTrans,
              b_transposed ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, a_transposed ? m : k, b,
              b_transposed ? k : n, accumulate ? 1.0f : 0.0f, c, n);
}

void MlpBackward(int m, int in, int hidden, int out, const float* x, const float* h,
                 const float* w2, const float* dz, float* dh, float* gw1, float* gb1, float* gw2,
                 float* gb2) {
  Gemm(true, false, out, hidden, m, dz, h, gw2, false);
  std::fill(gb2, gb2 + out, 0.0f);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < out; ++j) gb2[j] += dz[static_cast<int64_t>(i) * out + j];
  Gemm(false, false, m, hidden, out, dz, w2, dh, false);
  for (int64_t i = 0; i < static_cast<int64_t>(m) * hidden; ++i)
    if (h[i] <= 0) dh[i] = 0;
  Gemm(true, false, hidden, in, m, dh, x, gw1, false);
  std::fill(gb1, gb1 + hidden, 0.0f);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < hidden; ++j) gb1[j] += dh[static_cast<int64_t>(i) * hidden + j];
}

}  // namespace moex::policy

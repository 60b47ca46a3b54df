// The pieces the policies' small learned predictors share (ProMoE's per-layer MLPs,
// ExpertFlow's routing-path predictor): a row-major GEMM over BLAS and the backward pass of
// a two-layer ReLU MLP. Both run in a fixed order on one thread, so training is
// deterministic given the data order.
#pragma once

namespace moex::policy {

// Row-major C[m, n] = A[m, k] · op(B) (+ C when accumulate), op(B) = B[k, n] or B[n, k]ᵀ.
void Gemm(bool a_transposed, bool b_transposed, int m, int n, int k, const float* a, const float* b,
          float* c, bool accumulate);

// Gradients of z = W2 · relu(W1 · x + b1) + b2 over a minibatch of m rows, given dz [m, out]
// (dL/dz), the inputs x [m, in], the hidden activations h [m, hidden] (after the ReLU) and
// W2 [out, hidden]: fills gw2 [out, hidden], gb2 [out], gw1 [hidden, in], gb1 [hidden], and
// dh [m, hidden] with dL/d(W1 · x + b1), from which a caller may take dL/dx.
void MlpBackward(int m, int in, int hidden, int out, const float* x, const float* h,
                 const float* w2, const float* dz, float* dh, float* gw1, float* gb1, float* gw2,
                 float* gb2);

}  // namespace moex::policy

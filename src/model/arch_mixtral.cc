// Mixtral (and Phi-3.5-MoE, which shares its checkpoint names): experts live under
// block_sparse_moe, w1 = gate, w3 = up, w2 = down; top-2 with softmax over the top-k.
// Phi-3.5-MoE adds LayerNorm biases, an o_proj bias and an lm_head bias under the default
// names (TensorNames::*_bias) and routes with sparsemixer (ModelConfig flags).
#include "model/tensor_names.h"

namespace moex {

TensorNames MixtralTensorNames() {
  TensorNames n;
  n.router = "block_sparse_moe.gate.weight";
  n.expert_gate = "block_sparse_moe.experts.{e}.w1.weight";
  n.expert_up = "block_sparse_moe.experts.{e}.w3.weight";
  n.expert_down = "block_sparse_moe.experts.{e}.w2.weight";
  return n;
}

}  // namespace moex

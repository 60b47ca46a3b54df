// MiniMax-M2 / M2.1 (minimax_m2): Mixtral's MoE names (block_sparse_moe.gate, experts.N.w1/w3/w2)
// plus the gate's e_score_correction_bias beside it, and whole-width self_attn.q_norm /
// k_norm. The MTP modules are never looked up.
#include "model/tensor_names.h"

namespace moex {

TensorNames MiniMaxM2TensorNames() {
  TensorNames n = MixtralTensorNames();
  n.router_bias = "block_sparse_moe.e_score_correction_bias";
  return n;
}

}  // namespace moex

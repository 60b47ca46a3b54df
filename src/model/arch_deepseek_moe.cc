// DeepSeek-MoE (v1): the first `first_k_dense_replace` layers are dense SwiGLU FFNs; MoE
// layers add `n_shared_experts` always-on experts, stored fused as one wide FFN.
#include "model/tensor_names.h"

namespace moex {

TensorNames DeepseekMoeTensorNames() {
  TensorNames n;
  n.shared_gate = "mlp.shared_experts.gate_proj.weight";
  n.shared_up = "mlp.shared_experts.up_proj.weight";
  n.shared_down = "mlp.shared_experts.down_proj.weight";
  return n;
}

}  // namespace moex

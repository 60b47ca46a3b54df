// GLM-4.5 / 4.5-Air / 4.6 / 4.7 (glm4_moe): Llama's attention names (q/k/v biases, optional
// per-head q_norm/k_norm), DeepSeek-V3's MoE names (mlp.gate with its
// e_score_correction_bias, mlp.experts.N, fused mlp.shared_experts) and dense mlp.*_proj in
// the first first_k_dense_replace layers. The MTP layers
// (model.layers.{num_hidden_layers + i}) are never looked up.
#include "model/tensor_names.h"

namespace moex {

TensorNames Glm4MoeTensorNames() { return DeepseekMoeTensorNames(); }

}  // namespace moex

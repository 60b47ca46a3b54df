// DeepSeek-V2 / V2-Lite / V3: MLA attention (TensorNames' q_a/q_b/kv_a/kv_b names, plain
// q_proj when q_lora_rank is null), DeepSeek-MoE's fused shared experts and dense leading
// layers, and V3's gate correction bias (mlp.gate.e_score_correction_bias). V3's MTP
// layers (model.layers.{num_hidden_layers + i}) are never looked up.
#include "model/tensor_names.h"

namespace moex {

TensorNames DeepseekMlaTensorNames() {
  TensorNames n = DeepseekMoeTensorNames();
  // llama.cpp's MLA graph multiplies attn_q without its .scale (only attn_output's is used).
  n.q_scale.clear();
  return n;
}

}  // namespace moex

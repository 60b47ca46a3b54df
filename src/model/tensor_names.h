// HF tensor names of each architecture (each family's adapter, model/arch/<family>.cc,
// fills them in); the forward pass is shared and reads only these names and ModelConfig
// flags.
#pragma once

#include <string>

#include "model/model_config.h"

namespace moex {

enum class ExpertMatrix { kGate, kUp, kDown };

struct TensorNames {
  // Whole-model tensors.
  std::string embed = "model.embed_tokens.weight";
  std::string final_norm = "model.norm.weight";
  std::string lm_head = "lm_head.weight";
  std::string final_norm_bias = "model.norm.bias";  // LayerNorm models (Phi-3.5-MoE).
  std::string lm_head_bias = "lm_head.bias";

  // Per-layer tensors: the prefix "model.layers.{i}." is prepended by Layer().
  std::string attn_norm = "input_layernorm.weight";
  std::string ffn_norm = "post_attention_layernorm.weight";
  std::string attn_norm_bias = "input_layernorm.bias";  // LayerNorm models.
  std::string ffn_norm_bias = "post_attention_layernorm.bias";
  std::string q = "self_attn.q_proj.weight";
  std::string k = "self_attn.k_proj.weight";
  std::string v = "self_attn.v_proj.weight";
  std::string o = "self_attn.o_proj.weight";
  std::string q_bias = "self_attn.q_proj.bias";
  std::string k_bias = "self_attn.k_proj.bias";
  std::string v_bias = "self_attn.v_proj.bias";
  std::string o_bias = "self_attn.o_proj.bias";
  std::string q_norm = "self_attn.q_norm.weight";
  // MLA (DeepSeek-V2/V3): low-rank q (q_a, its RMSNorm, q_b; or plain q above), the joint
  // latent + k_pe projection, the latent's RMSNorm and its up-projection to k_nope and v.
  std::string q_a = "self_attn.q_a_proj.weight";
  std::string q_a_norm = "self_attn.q_a_layernorm.weight";
  std::string q_b = "self_attn.q_b_proj.weight";
  std::string kv_a = "self_attn.kv_a_proj_with_mqa.weight";
  std::string kv_a_norm = "self_attn.kv_a_layernorm.weight";
  std::string kv_b = "self_attn.kv_b_proj.weight";
  // llama.cpp's split kv_b (GGUF attn_k_b [H, L, nope], attn_v_b [H, v, L]); no HF name.
  std::string k_b = "self_attn.k_b.weight";
  std::string v_b = "self_attn.v_b.weight";
  std::string k_norm = "self_attn.k_norm.weight";
  // Gated DeltaNet layers (config.delta_net). HF's Qwen3-Next fuses q, k, v and z into one
  // projection grouped per key head (each group: its q head, k head, then the v and z heads
  // that read it) and b, a the same way (each group: its v heads' b, then their a);
  // llama.cpp's converter splits q/k/v (heads in order) from z, and keeps b/a grouped.
  std::string gdn_qkvz = "linear_attn.in_proj_qkvz.weight";
  std::string gdn_qkv = "linear_attn.in_proj_qkv.weight";
  std::string gdn_z = "linear_attn.in_proj_z.weight";
  std::string gdn_ba = "linear_attn.in_proj_ba.weight";
  // Qwen3.5: b and a apart, v heads in order (no gdn_qkvz or gdn_ba).
  std::string gdn_b = "linear_attn.in_proj_b.weight";
  std::string gdn_a = "linear_attn.in_proj_a.weight";
  std::string gdn_conv =
      "linear_attn.conv1d.weight";  // [conv_dim, 1, kernel] (or [conv_dim, kernel]).
  std::string gdn_dt_bias = "linear_attn.dt_bias";
  std::string gdn_a_log = "linear_attn.A_log";
  // llama.cpp's ssm_a, -exp(A_log) as its converter stores it; no HF name.
  std::string gdn_neg_a = "linear_attn.ssm_a";
  std::string gdn_norm = "linear_attn.norm.weight";
  std::string gdn_out = "linear_attn.out_proj.weight";
  std::string router = "mlp.gate.weight";
  std::string router_bias = "mlp.gate.e_score_correction_bias";  // DeepSeek-V3 (noaux_tc).
  std::string router_linear_bias = "mlp.gate.bias";  // Added to the logits (gpt-oss).
  std::string sinks = "self_attn.sinks";             // [num_heads] (gpt-oss).
  // Per-layer routed-expert biases [E, F] (gate, up) and [E, d] (down) (gpt-oss; HF stores
  // gate and up interleaved in one tensor, see model/gpt_oss_weights.h).
  std::string expert_gate_bias = "mlp.experts.gate_proj.bias";
  std::string expert_up_bias = "mlp.experts.up_proj.bias";
  std::string expert_down_bias = "mlp.experts.down_proj.bias";
  // Routed expert matrices: "{e}" is replaced by the expert index.
  std::string expert_gate = "mlp.experts.{e}.gate_proj.weight";
  std::string expert_up = "mlp.experts.{e}.up_proj.weight";
  std::string expert_down = "mlp.experts.{e}.down_proj.weight";
  // Shared expert(s) and their sigmoid gate (Qwen2-MoE), and dense-layer FFNs (DeepSeek).
  std::string shared_gate = "mlp.shared_expert.gate_proj.weight";
  std::string shared_up = "mlp.shared_expert.up_proj.weight";
  std::string shared_down = "mlp.shared_expert.down_proj.weight";
  std::string shared_expert_gate = "mlp.shared_expert_gate.weight";
  std::string dense_gate = "mlp.gate_proj.weight";
  std::string dense_up = "mlp.up_proj.weight";
  std::string dense_down = "mlp.down_proj.weight";
  // llama.cpp's per-matrix output scales (shape [1]; the routed experts' [E]), read when the
  // file has them. Empty where llama.cpp's graph for the architecture does not multiply
  // them in: such a scale is ignored, as llama.cpp ignores it (docs/formats.md).
  std::string lm_head_scale = "lm_head.scale";
  std::string q_scale = "self_attn.q_proj.scale";
  std::string k_scale = "self_attn.k_proj.scale";
  std::string v_scale = "self_attn.v_proj.scale";
  std::string o_scale = "self_attn.o_proj.scale";
  std::string expert_gate_scale, expert_up_scale, expert_down_scale;
  std::string shared_gate_scale, shared_up_scale, shared_down_scale;
  std::string gdn_qkv_scale, gdn_z_scale, gdn_b_scale, gdn_a_scale, gdn_out_scale;

  static std::string Layer(int layer, const std::string& name) {
    return "model.layers." + std::to_string(layer) + "." + name;
  }
  std::string Expert(int layer, int expert, ExpertMatrix which) const;
};

// The names used by `config.arch`.
TensorNames TensorNamesFor(const ModelConfig& config);

}  // namespace moex

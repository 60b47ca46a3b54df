// The hyper-parameters of a MoE checkpoint, read from its config.json (or GGUF metadata).
// Nothing about a model's shape is hard-coded anywhere else: adapters read this struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace moex {

enum class Arch {
  kMixtral,      // model_type "mixtral"
  kPhiMoe,       // model_type "phimoe" (Phi-3.5-MoE)
  kQwen2Moe,     // model_type "qwen2_moe" (Qwen1.5-MoE and Qwen2-MoE)
  kQwen3Moe,     // model_type "qwen3_moe"
  kOlmoe,        // model_type "olmoe"
  kDeepseekMoe,  // model_type "deepseek" (DeepSeek-MoE 16B, v1)
};

const char* ArchName(Arch arch);          // The HF model_type string.
Arch ParseArch(const std::string& name);  // Accepts model_type strings; throws otherwise.

// Normalisation of the residual stream (layer inputs and the final norm).
enum class NormKind {
  kRms,        // x / sqrt(mean(x^2) + eps) * weight.
  kLayerNorm,  // (x - mean) / sqrt(var + eps) * weight + bias (Phi-3.5-MoE).
};

// How router logits become expert ids and combine weights (src/engine/router.h).
enum class RouterKind {
  kSoftmaxTopK,  // Softmax over all experts, the k largest, optionally renormalised.
  kSparseMixer,  // Phi-3.5-MoE's sparsemixer (eval mode): top-2 with masked softmaxes.
};

// LongRoPE ("longrope" / Phi-3 "su" scaling): per-frequency extension factors and an
// output scale, one set for sequences up to original_max_position_embeddings ("short") and
// one beyond ("long"). See docs/architectures.md for how moex chooses between them.
struct LongRope {
  std::vector<float> short_factor, long_factor;  // head_dim / 2 entries each.
  float short_mscale = 1.0f;
  float long_mscale = 1.0f;
  int original_max_position_embeddings = 0;
};

struct ModelConfig {
  Arch arch = Arch::kMixtral;
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2-MoE).
  bool qk_norm = false;         // RMSNorm on q and k (OLMoE: over all heads; Qwen3: per head).
  bool qk_norm_per_head = false;
  bool attention_out_bias = false;  // o_proj carries a bias too (Phi-3.5-MoE).
  bool lm_head_bias = false;        // lm_head carries a bias (Phi-3.5-MoE).
  NormKind norm = NormKind::kRms;   // LayerNorm uses rms_norm_eps as its eps (as HF does).
  std::optional<LongRope> longrope;  // Unset: plain RoPE.
  int sliding_window = 0;           // 0: none. moex refuses sequences longer than it.

  // Routed experts.
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;  // Neurons per routed expert (F).
  bool norm_topk_prob = false;    // Renormalise the top-k weights to sum to 1.
  float routed_scaling_factor = 1.0f;
  RouterKind router = RouterKind::kSoftmaxTopK;
  double router_jitter_noise = 0.0;  // Sparsemixer's jitter_eps (masks at 2 * jitter).

  // Shared experts (Qwen2-MoE: one, with a sigmoid gate; DeepSeek-MoE: n_shared_experts).
  int shared_expert_intermediate_size = 0;  // 0 = none.
  bool shared_expert_gate = false;

  // Dense FFN layers (DeepSeek-MoE: the first `first_k_dense_replace` layers).
  int intermediate_size = 0;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;

  // Token ids.
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  bool IsMoeLayer(int layer) const {
    return layer >= first_k_dense_replace && (layer % moe_layer_freq) == 0;
  }
  int64_t ExpertParams() const {
    return 3ll * hidden_size * moe_intermediate_size;
  }

  // Parses an HF config.json object. Throws Error naming the missing or invalid field.
  static ModelConfig FromHfJson(const nlohmann::json& config);
  nlohmann::json ToHfJson() const;
  // Checks internal consistency (divisibility, positive sizes); throws Error.
  void Validate() const;
};

}  // namespace moex

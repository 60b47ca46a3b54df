// Shapes of the MLA architectures for `moex random-model` (random_model.h): full is the
// published DeepSeek-V2-Lite / DeepSeek-V3 config; small and tiny keep the topology (MLA
// with or without q_lora, shared experts, one leading dense layer, the gate's groups) and
// shrink widths and depth.
#include "model/random_model.h"

#include <algorithm>

namespace moex {

ModelConfig RandomMlaConfig(Arch arch, ModelSize size) {
  ModelConfig c;
  c.arch = arch;
  c.router = RouterKind::kGroupedTopK;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 10000.0f;
  c.max_position_embeddings = 163840;
  Mla m;
  m.kv_lora_rank = 512;
  m.qk_nope_head_dim = 128;
  m.qk_rope_head_dim = 64;
  m.v_head_dim = 128;
  Yarn y;
  y.factor = 40.0f;
  y.original_max_position_embeddings = 4096;
  y.beta_fast = 32.0f;
  y.beta_slow = 1.0f;
  if (arch == Arch::kDeepseekV2) {  // DeepSeek-V2-Lite.
    c.vocab_size = 102400;
    c.hidden_size = 2048;
    c.num_layers = 27;
    c.num_heads = 16;
    c.num_experts = 64;
    c.num_experts_per_tok = 6;
    c.moe_intermediate_size = 1408;
    c.intermediate_size = 10944;
    c.shared_expert_intermediate_size = 2 * 1408;
    c.first_k_dense_replace = 1;
    c.scoring_func = ScoringFunc::kSoftmax;
    c.topk_method = TopKMethod::kGreedy;
    c.norm_topk_prob = false;
    c.routed_scaling_factor = 1.0f;
    c.scale_normalised_weights = false;
    c.bos_token_id = 100000;
    c.eos_token_ids = {100001};
    m.q_lora_rank = 0;
    y.mscale = 0.707f;
    y.mscale_all_dim = 0.707f;
  } else {  // DeepSeek-V3.
    c.vocab_size = 129280;
    c.hidden_size = 7168;
    c.num_layers = 61;
    c.num_heads = 128;
    c.num_experts = 256;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 2048;
    c.intermediate_size = 18432;
    c.shared_expert_intermediate_size = 2048;
    c.first_k_dense_replace = 3;
    c.scoring_func = ScoringFunc::kSigmoid;
    c.topk_method = TopKMethod::kNoauxTc;
    c.n_group = 8;
    c.topk_group = 4;
    c.norm_topk_prob = true;
    c.routed_scaling_factor = 2.5f;
    c.scale_normalised_weights = true;
    c.bos_token_id = 0;
    c.eos_token_ids = {1};
    c.num_nextn_predict_layers = 1;
    m.q_lora_rank = 1536;
    y.mscale = 1.0f;
    y.mscale_all_dim = 1.0f;
  }
  if (size == ModelSize::kSmall) {
    c.hidden_size = 1024;
    c.num_heads = 16;
    c.num_layers = 8;
    const int f = std::max(c.moe_intermediate_size / 4, 64);
    c.shared_expert_intermediate_size =
        c.shared_expert_intermediate_size / c.moe_intermediate_size * f;
    c.moe_intermediate_size = f;
    c.intermediate_size = 4 * f;
    c.first_k_dense_replace = 1;
    c.num_experts = std::min(c.num_experts, 64);
    if (c.n_group > 1) c.n_group = 4, c.topk_group = 2;
    m.kv_lora_rank = 256;
    m.qk_nope_head_dim = 64;
    m.qk_rope_head_dim = 32;
    m.v_head_dim = 64;
    if (m.q_lora_rank > 0) m.q_lora_rank = 384;
    y.original_max_position_embeddings = 512;
    c.num_nextn_predict_layers = 0;
  } else if (size == ModelSize::kTiny) {
    // Fast enough for the double-precision reference; YaRN's original length is small so
    // its interpolated band covers rotations the tests reach.
    c.vocab_size = 512;
    c.hidden_size = 64;
    c.num_heads = 4;
    c.num_layers = 3;
    c.num_experts = 16;
    c.moe_intermediate_size = 32;
    c.intermediate_size = 128;
    c.shared_expert_intermediate_size = c.shared_expert_intermediate_size > 2048 ? 64 : 32;
    c.first_k_dense_replace = 1;
    c.max_position_embeddings = 512;
    c.eos_token_ids = {2};
    c.bos_token_id = 1;
    c.num_nextn_predict_layers = 0;
    m.kv_lora_rank = 32;
    m.qk_nope_head_dim = 16;
    m.qk_rope_head_dim = 8;
    m.v_head_dim = 12;
    if (m.q_lora_rank > 0) m.q_lora_rank = 24;
    if (arch == Arch::kDeepseekV3) {
      c.num_experts_per_tok = 4;
      c.n_group = 4;
      c.topk_group = 2;
      // Not V3's mscale = mscale_all_dim: this exercises both of YaRN's magnitude terms.
      y.mscale_all_dim = 0.8f;
    } else {
      c.num_experts_per_tok = 4;
    }
    y.factor = 4.0f;
    y.original_max_position_embeddings = 32;
  }
  c.mla = m;
  c.yarn = y;
  c.head_dim = m.qk_rope_head_dim;
  c.num_kv_heads = c.num_heads;
  return c;
}

}  // namespace moex

// llama.cpp's "glm4moe" GGUF architecture (GLM-4.5 / 4.5-Air / 4.6 / 4.7) on both sides of
// the GGUF adapter (gguf_model_reader.cc, gguf_model_writer.cc).
//
// Keys (llama.cpp's meaning, as its converter's Glm4MoeModel writes them): block_count
// counts the nextn_predict_layers multi-token-prediction blocks at its end (not run);
// rope.dimension_count is the rotated part of a head, int(head_dim * partial_rotary_factor)
// (absent: the whole head); feed_forward_length is the dense layers' size;
// leading_dense_block_count, expert_shared_count, expert_weights_scale (absent: 1),
// expert_weights_norm, expert_gating_func (2 = sigmoid, the only gate GLM has; absent:
// sigmoid), expert_group_count / expert_group_used_count (absent: one group, as every
// published GLM-4.5 config).
//
// Tensors: llama.cpp's names, except that HF's post_attention_layernorm is
// post_attention_norm (llama.cpp's attn_post_norm, the FFN's input norm), the gate's
// e_score_correction_bias is exp_probs_b.bias, and per-head q/k norms (use_qk_norm) are
// attn_q_norm / attn_k_norm. Q and K rows are not permuted (GLM's RoPE is NeoX-style).
#pragma once

#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "model/model_config.h"

namespace moex::gguf_glm4moe {

// Completes `c` (arch kGlm4Moe, generic keys read) from the glm4moe keys and tensors of
// `f`. Throws Error naming a key with a value moex does not implement.
void ReadConfig(const GgufFile& f, ModelConfig& c);

// Writes the glm4moe keys (after the generic ones, replacing those it redefines).
void WriteConfig(const ModelConfig& c, GgufWriter& w);

}  // namespace moex::gguf_glm4moe

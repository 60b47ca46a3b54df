// llama.cpp's "deepseek2" GGUF architecture (DeepSeek-V2 / V2-Lite / V3) on both sides of
// the GGUF adapter (gguf_model_reader.cc, gguf_model_writer.cc): its metadata keys and the
// MLA tensors that have no one-to-one HF counterpart.
//
// Keys (llama.cpp's meaning): attention.q_lora_rank (absent or 0: plain q), kv_lora_rank,
// key_length_mla / value_length_mla (qk_nope + qk_rope and v_head_dim; files without them
// are the older layout whose key_length / value_length hold those sizes),
// rope.dimension_count (qk_rope), head_count_kv 1 (MLA as multi-query attention over the
// latent), leading_dense_block_count, expert_shared_count, expert_weights_scale (0 or
// absent: 1), expert_weights_norm, expert_gating_func (1 softmax, 2 sigmoid; absent:
// softmax), expert_group_count / expert_group_used_count, nextn_predict_layers (MTP
// blocks at the end of block_count: not run), rope.scaling.{type = yarn, factor,
// original_context_length, yarn_log_multiplier = 0.1 mscale_all_dim, yarn_beta_fast,
// yarn_beta_slow}. llama.cpp has no key for HF's rope_scaling.mscale (it uses
// mscale = mscale_all_dim, as the published configs do); moex writes its own
// deepseek2.rope.scaling.yarn_mscale when they differ and reads it back.
//
// Which gate: sigmoid scoring or exp_probs_b tensors (the correction bias) mean V3
// (noaux_tc); otherwise V2 with group_limited_greedy when there are groups, else greedy.
//
// Tensors: kv_b_proj is stored split, as llama.cpp's converter does: attn_k_b [H, L, nope]
// (each head's k rows transposed) and attn_v_b [H, v_head_dim, L]; reading joins them back
// into kv_b_proj (f32). Older files with one attn_kv_b are read as they are.
// e_score_correction_bias is exp_probs_b.bias.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "model/model_config.h"

namespace moex::gguf_deepseek2 {

// HF stem (under model.layers.{i}.) of the V3 gate bias and its GGUF stem (suffix .bias).
inline constexpr const char* kHfRouterBias = "mlp.gate.e_score_correction_bias";
inline constexpr const char* kGgufRouterBias = "exp_probs_b";

// Completes `c` (arch set to kDeepseekV2, generic keys read) from the deepseek2 keys and
// tensors of `f`. Throws Error naming a missing or inconsistent key.
void ReadConfig(const GgufFile& f, ModelConfig& c);

// kv_b_proj [H * (nope + v), L] in f32 from llama.cpp's attn_k_b [H, L, nope] and attn_v_b
// [H, v, L]; throws Error when their shapes do not match `c`.
std::vector<float> JoinKvB(const TensorView& k_b, const TensorView& v_b, const ModelConfig& c);

// Writes the deepseek2 keys (after the generic ones, replacing those MLA reads otherwise).
void WriteConfig(const ModelConfig& c, GgufWriter& w);

// The two GGUF tensors of one kv_b_proj: shapes and fills in `dtype` (f32, f16 or bf16).
struct SplitTensor {
  std::vector<int64_t> shape;
  ByteFill fill;
};
SplitTensor KBFromKvB(const TensorView& kv_b, const ModelConfig& c, DType dtype);
SplitTensor VBFromKvB(const TensorView& kv_b, const ModelConfig& c, DType dtype);

}  // namespace moex::gguf_deepseek2

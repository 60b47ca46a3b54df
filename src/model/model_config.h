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
  kDeepseekV2,   // model_type "deepseek_v2" (DeepSeek-V2, V2-Lite): MLA, softmax gate
  kDeepseekV3,   // model_type "deepseek_v3" (DeepSeek-V3/R1): MLA, sigmoid gate with bias
  kGlm4Moe,      // model_type "glm4_moe" (GLM-4.5, 4.5-Air, 4.6, 4.7): partial RoPE, V3's gate
  kGptOss,       // model_type "gpt_oss" (gpt-oss-20b/120b): sinks, sliding layers, biased experts
  kMiniMaxM2,    // model_type "minimax_m2" (MiniMax-M2, M2.1): whole-width q/k norm, partial
                 // RoPE, V3's sigmoid gate with bias in one group
  kQwen3Next,    // model_type "qwen3_next" (Qwen3-Next-80B-A3B): Gated DeltaNet layers between
                 // gated full-attention layers, Qwen2-MoE's experts with a gated shared expert
  kQwen35Moe,    // model_type "qwen3_5_moe" (Qwen3.5-35B-A3B): Qwen3-Next's layers, other tensors
  kLlama4,       // model_type "llama4" (Llama 4 Scout/Maverick, text part): chunked RoPE layers
                 // and full NoPE layers, top-1 sigmoid experts weighting their input
};

// HF GptOssConfig's default layer_types (and llama.cpp's gpt-oss pattern): sliding, full,
// sliding, ... (true = sliding).
std::vector<bool> AlternatingSlidingLayers(int num_layers);

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
  kGroupedTopK,  // DeepSeek-V2/V3's gate: scoring function, groups, correction bias.
};

// DeepSeek's gate (RouterKind::kGroupedTopK), see src/engine/router.h.
enum class ScoringFunc { kSoftmax, kSigmoid };
enum class TopKMethod {
  kGreedy,              // The k best scores.
  kGroupLimitedGreedy,  // V2: the topk_group groups with the best max score, then top-k.
  kNoauxTc,             // V3: scores + correction bias; groups by their top-2 sum, then top-k.
};

// Multi-head Latent Attention (DeepSeek-V2/V3). Queries come from q_proj, or through the
// low-rank q_a_proj -> RMSNorm -> q_b_proj when q_lora_rank > 0; keys and values from one
// compressed latent of kv_lora_rank values (RMSNorm'd) plus a k_pe of qk_rope_head_dim
// values shared by every head. The KV cache holds only latent and k_pe.
struct Mla {
  int q_lora_rank = 0;  // 0: a plain q_proj (DeepSeek-V2-Lite).
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Floats cached per token and layer: the latent and the rotated k_pe.
  int cache_row() const { return kv_lora_rank + qk_rope_head_dim; }
};

// YaRN rope_scaling as DeepSeek-V2/V3 configure it (HF DeepseekV2YarnRotaryEmbedding):
// frequencies between the beta_fast and beta_slow corrections blend from interpolated
// (divided by factor) to original; cos/sin are scaled by mscale(factor, mscale) /
// mscale(factor, mscale_all_dim) and the attention softmax scale by mscale(factor,
// mscale_all_dim)^2, where mscale(s, m) = s <= 1 ? 1 : 0.1 m ln(s) + 1.
// HF's generic YaRN (gpt-oss) is the case mscale 1, mscale_all_dim 0 (cos/sin times
// 0.1 ln(factor) + 1), with `truncate` false leaving the correction range unrounded.
struct Yarn {
  float factor = 1.0f;
  int original_max_position_embeddings = 0;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 1.0f;
  float mscale_all_dim = 0.0f;
  bool truncate = true;  // Floor/ceil the correction range (DeepSeek always does).
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

// Gated DeltaNet linear attention (Qwen3-Next's linear_attention layers). Per token, one
// projection gives q, k (num_k_heads heads of k_head_dim), v and the output gate z (num_v_heads
// heads of v_head_dim), another beta and the decay input a per v head; q, k and v pass a causal
// depthwise convolution of conv_kernel taps and SiLU; q and k are L2-normalised, q scaled by
// 1/sqrt(k_head_dim); v head h reads q/k head h / (num_v_heads / num_k_heads) (HF's grouped
// order), or h % num_k_heads with tiled_v_heads (llama.cpp's qwen35moe files). Each v head keeps
// a state S [k_head_dim, v_head_dim]: S <- exp(g) S, S <- S + k (beta (v - S^T k))^T, o = S^T q,
// with beta = sigmoid(b) and g = -exp(A_log) softplus(a + dt_bias). The output is RMSNorm'd per
// head, times silu(z), and projected back. A sequence caches no rows for these layers, only
// its state (kv_cache.h).
struct GatedDeltaNet {
  int num_k_heads = 0;
  int num_v_heads = 0;
  int k_head_dim = 0;
  int v_head_dim = 0;
  int conv_kernel = 0;
  bool tiled_v_heads = false;
  // The q/k head v head `h` reads.
  int64_t KeyHeadOf(int64_t h) const {
    return tiled_v_heads ? h % num_k_heads : h / (num_v_heads / num_k_heads);
  }
  int64_t key_dim() const { return static_cast<int64_t>(num_k_heads) * k_head_dim; }
  int64_t value_dim() const { return static_cast<int64_t>(num_v_heads) * v_head_dim; }
  // Channels of the convolution: q, k and v.
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  // Floats a sequence keeps per layer: the convolution's last conv_kernel - 1 inputs and the
  // recurrent state of every v head.
  int64_t state_floats() const {
    return (conv_kernel - 1) * conv_dim() +
           static_cast<int64_t>(num_v_heads) * k_head_dim * v_head_dim;
  }
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
  std::optional<Yarn> yarn;          // Unset: no YaRN (DeepSeek-V2/V3 only).
  // MLA (DeepSeek-V2/V3): then head_dim is qk_rope_head_dim (the rotated part) and
  // num_kv_heads = num_heads; q/k/v tensors are replaced by the MLA projections.
  std::optional<Mla> mla;
  int num_nextn_predict_layers = 0;  // DeepSeek-V3's MTP layers: ignored (read, not run).
  // 0: none. Without layer_sliding, moex refuses sequences longer than it (phimoe); with
  // it, the layers marked true attend to the last sliding_window positions (gpt-oss).
  int sliding_window = 0;
  std::vector<bool> layer_sliding;  // Empty, or one entry per layer (HF layer_types).
  bool attention_sinks = false;     // One learned logit per head joins the softmax (gpt-oss).
  // Partial rotary (GLM-4.5's partial_rotary_factor): RoPE turns the first rope_dim values
  // of each q/k head (rotate-half within them), the rest pass through. 0: the whole head.
  int rope_dim = 0;
  int RotaryDim() const { return rope_dim > 0 ? rope_dim : head_dim; }
  // Gated attention (Qwen3-Next): q_proj gives, per head, head_dim query rows then head_dim
  // gate rows; the attention output is multiplied by sigmoid(gate) before o_proj.
  bool attention_output_gate = false;
  // Gated DeltaNet layers: set, and layer_linear has one entry per layer (true: a Gated
  // DeltaNet layer, HF layer_types "linear_attention"; false: full attention).
  std::optional<GatedDeltaNet> delta_net;
  std::vector<bool> layer_linear;
  // Added to the weight of every residual-stream norm and q/k norm when it is loaded: 1 for
  // the zero-centred RMSNorm of Qwen3-Next's HF checkpoints, x / rms(x) * (1 + w); llama.cpp's
  // converter stores 1 + w, so its GGUF files need 0.
  float norm_weight_offset = 0.0f;
  // Llama 4's attention (docs/architectures.md). Layers marked in layer_nope (one entry per
  // layer, or empty) use no RoPE; on them, when attn_temperature_floor > 0, each query at
  // position p is multiplied by log(floor((p + 1) / attn_temperature_floor) + 1) *
  // attn_temperature_scale + 1. Layers marked in layer_chunked attend only within their
  // chunk: positions p - p % attention_chunk_size .. p. With qk_norm_unweighted, q and k
  // heads of the RoPE layers are RMS-normalised without weights after RoPE.
  std::vector<bool> layer_nope;
  int attn_temperature_floor = 0;
  float attn_temperature_scale = 0.0f;
  int attention_chunk_size = 0;
  std::vector<bool> layer_chunked;
  bool qk_norm_unweighted = false;

  // Routed experts.
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;  // Neurons per routed expert (F).
  bool norm_topk_prob = false;    // Renormalise the top-k weights to sum to 1.
  float routed_scaling_factor = 1.0f;
  RouterKind router = RouterKind::kSoftmaxTopK;
  bool router_bias = false;  // The router Linear carries a bias (gpt-oss).
  // gpt-oss's experts: biases on gate, up and down, and the clamped activation
  // (up + 1) * g * sigmoid(1.702 g), g = min(gate, limit), up clamped to +-limit.
  // 0: plain SwiGLU without biases.
  float swiglu_limit = 0.0f;
  double router_jitter_noise = 0.0;  // Sparsemixer's jitter_eps (masks at 2 * jitter).
  // kGroupedTopK only.
  ScoringFunc scoring_func = ScoringFunc::kSoftmax;
  TopKMethod topk_method = TopKMethod::kGreedy;
  int n_group = 1;
  int topk_group = 1;
  // V3 multiplies the (renormalised) weights by routed_scaling_factor; V2 only when it does
  // not renormalise them.
  bool scale_normalised_weights = true;
  // The router's weight multiplies each routed expert's input instead of its output (Llama 4;
  // llama.cpp's weight_before_ffn). Same result for a linear expert, not for SwiGLU.
  bool expert_weight_on_input = false;

  // Shared experts (Qwen2-MoE: one, with a sigmoid gate; DeepSeek-MoE: n_shared_experts).
  int shared_expert_intermediate_size = 0;  // 0 = none.
  bool shared_expert_gate = false;

  // Dense FFN layers (DeepSeek-MoE: the first `first_k_dense_replace` layers).
  int intermediate_size = 0;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  // MoE layers are those where (layer + moe_layer_offset) % moe_layer_freq == 0 (Llama 4's
  // interleave_moe_layer_step: offset 1, the step's last layer).
  int moe_layer_offset = 0;

  // Token ids.
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  bool IsDeepseekMla() const { return arch == Arch::kDeepseekV2 || arch == Arch::kDeepseekV3; }
  // Positions a query of `layer` attends back over, itself included; 0: all of them.
  int AttentionWindow(int layer) const {
    return layer_sliding.empty() || !layer_sliding[static_cast<size_t>(layer)] ? 0
                                                                                : sliding_window;
  }
  bool ExpertBiases() const { return swiglu_limit > 0; }
  bool IsLinearLayer(int layer) const {
    return !layer_linear.empty() && layer_linear[static_cast<size_t>(layer)];
  }
  // True when some layer keeps a recurrent state instead of KV rows.
  bool HasRecurrentLayers() const { return delta_net.has_value(); }
  bool IsMoeLayer(int layer) const {
    return layer >= first_k_dense_replace && ((layer + moe_layer_offset) % moe_layer_freq) == 0;
  }
  bool IsNopeLayer(int layer) const {
    return !layer_nope.empty() && layer_nope[static_cast<size_t>(layer)];
  }
  // The chunk of `layer`'s attention; 0: none.
  int AttentionChunk(int layer) const {
    return layer_chunked.empty() || !layer_chunked[static_cast<size_t>(layer)]
               ? 0
               : attention_chunk_size;
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

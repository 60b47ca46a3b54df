// A loaded model: its config, the weight source that owns the mapped tensors, and per-layer
// views resolved once at load time (names come from the architecture's TensorNames). Small
// vectors (norm weights, biases) are converted to f32 here so the forward pass never
// re-reads or re-converts them.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/tensor.h"
#include "io/weight_source.h"
#include "model/expert_layout.h"
#include "model/model_config.h"
#include "model/sampling_defaults.h"
#include "model/tensor_names.h"

namespace moex {

// A SwiGLU FFN in HF layout: gate [F, d], up [F, d], down [d, F].
struct DenseFfn {
  const TensorView* gate = nullptr;
  const TensorView* up = nullptr;
  const TensorView* down = nullptr;
  int64_t neurons = 0;
  // llama.cpp's output scales (ffn_*_shexp.scale), 1 when the file has none.
  float gate_scale = 1.0f, up_scale = 1.0f, down_scale = 1.0f;
};

// One MLA up-projection half: per head h a row-major [rows, cols] matrix in `dtype` at
// Head(h), heads `head_bytes` apart. It points into the weight file (llama.cpp's attn_k_b /
// attn_v_b, or kv_b_proj's v rows) or into `owned` (a transposed copy of kv_b_proj's k rows).
struct MlaHeads {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  size_t head_bytes = 0;
  const std::byte* data = nullptr;  // Null when `owned` holds the matrices.
  std::vector<std::byte> owned;
  const std::byte* Head(int64_t h) const {
    return (data != nullptr ? data : owned.data()) + static_cast<size_t>(h) * head_bytes;
  }
  size_t Bytes(int64_t heads) const { return static_cast<size_t>(heads) * head_bytes; }
};

struct LayerWeights {
  ExpertShape expert_shape;  // MoE layers: how the routed experts' records are encoded.
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> attn_norm_bias, ffn_norm_bias;  // LayerNorm only.
  const TensorView* q = nullptr;
  const TensorView* k = nullptr;
  const TensorView* v = nullptr;
  const TensorView* o = nullptr;
  std::vector<float> q_bias, k_bias, v_bias;  // Empty when the architecture has none.
  std::vector<float> o_bias;                  // Empty unless attention_out_bias.
  // llama.cpp's per-matrix `.scale` tensors (NVFP4 files carry them): the projection's
  // output is multiplied by them before its bias. 1 when the file has none (docs/formats.md).
  float q_scale = 1.0f, k_scale = 1.0f, v_scale = 1.0f, o_scale = 1.0f;
  std::vector<float> q_norm, k_norm;  // Empty without q/k norm.
  std::vector<float> sinks;           // [num_heads] with attention_sinks (gpt-oss).
  // MLA (DeepSeek-V2/V3; q above is set only without q_lora_rank, k and v stay null).
  const TensorView* q_a = nullptr;   // [q_lora_rank, d]
  const TensorView* q_b = nullptr;   // [H * qk_head_dim, q_lora_rank]
  const TensorView* kv_a = nullptr;  // [kv_lora_rank + qk_rope_head_dim, d]
  std::vector<float> q_a_norm, kv_a_norm;
  // kv_b_proj's two halves as the absorbed attention multiplies them
  // (src/engine/mla_attention.cc), per head: k_up [kv_lora_rank, qk_nope] (q_nope -> latent
  // space) and v_up [v_head_dim, kv_lora_rank] (latent -> v).
  MlaHeads mla_k_up, mla_v_up;
  // Gated DeltaNet layers (config.delta_net; the attention tensors above stay null). The
  // input projection is either HF's grouped qkvz or q/k/v and z apart (TensorNames).
  const TensorView* gdn_qkvz = nullptr;  // [2 key_dim + 2 value_dim, d], grouped per key head.
  const TensorView* gdn_qkv = nullptr;   // [conv_dim, d]: all q heads, all k heads, all v heads.
  const TensorView* gdn_z = nullptr;     // [value_dim, d]
  const TensorView* gdn_ba = nullptr;    // [2 num_v_heads, d], grouped per key head.
  const TensorView* gdn_b = nullptr;     // [num_v_heads, d] (Qwen3.5: b and a apart, no gdn_ba).
  const TensorView* gdn_a = nullptr;     // [num_v_heads, d]
  const TensorView* gdn_out = nullptr;   // [d, value_dim]
  // llama.cpp's output scales of these projections, where its graph applies them (qwen35moe).
  float gdn_qkv_scale = 1.0f, gdn_z_scale = 1.0f, gdn_b_scale = 1.0f, gdn_a_scale = 1.0f;
  float gdn_out_scale = 1.0f;
  std::vector<float> gdn_conv;           // [conv_dim, conv_kernel]
  std::vector<float> gdn_dt_bias;        // [num_v_heads]
  std::vector<float> gdn_decay;          // [num_v_heads]: -exp(A_log).
  std::vector<float> gdn_norm;           // [v_head_dim], the gated RMSNorm's weight.

  bool is_moe = false;
  const TensorView* router = nullptr;    // [E, d]
  std::vector<float> router_bias;        // [E] DeepSeek-V3's e_score_correction_bias.
  std::vector<float> router_logit_bias;  // [E] the router Linear's bias (gpt-oss).
  // Routed-expert biases (gpt-oss), kept resident with the layer: gate and up [E, F] are
  // added before the activation (kernels::ExpertJob), down [E, d] to each expert's output
  // before the weighted combine (ExpertBatch::Combine). Empty otherwise.
  std::vector<float> expert_gate_bias, expert_up_bias, expert_down_bias;
  // Per-expert output scales [E] (llama.cpp's ffn_*_exps.scale), or empty: gate and up
  // before the activation (kernels::ExpertJob), down before the down bias and the weight.
  std::vector<float> expert_gate_scale, expert_up_scale, expert_down_scale;
  std::optional<DenseFfn> shared_expert;           // Qwen2-MoE / DeepSeek-MoE.
  const TensorView* shared_expert_gate = nullptr;  // [1, d] (Qwen2-MoE).
  std::optional<DenseFfn> dense_ffn;               // Dense layers (DeepSeek-MoE's first layers).
};

struct Model {
  std::string path;
  ModelConfig config;
  TensorNames names;
  std::unique_ptr<WeightSource> weights;
  // The record geometry every MoE layer shares (group, record bytes); its dtypes are the
  // first MoE layer's (LayerWeights::expert_shape has each layer's, expert_layout.h).
  ExpertShape expert_shape;
  // The source's tensors this architecture never reads (names in the file); a GGUF with
  // any is refused, as llama.cpp would compute with them.
  std::vector<std::string> unused_tensors;
  // What generation_config.json or the GGUF's general.sampling keys ask for.
  SamplingDefaults sampling;

  const TensorView* embed = nullptr;
  const TensorView* lm_head = nullptr;
  std::vector<float> final_norm;
  std::vector<float> final_norm_bias;  // LayerNorm only.
  std::vector<float> lm_head_bias;     // Empty unless lm_head_bias.
  float lm_head_scale = 1.0f;          // llama.cpp's output.scale, as LayerWeights::q_scale.
  std::vector<LayerWeights> layers;
  // The Linear weights' views (the layers' and lm_head's pointers point here) and the
  // model's own copies of their bytes, on huge pages: as stored, or interleaved for the int8
  // kernels (TensorView::interleaved).
  std::deque<TensorView> linear_views;
  std::deque<AlignedBuffer> linear_bytes;

  // Views of the three HF tensors of expert (layer, e); throws if missing or misshapen.
  void ExpertTensors(int layer, int expert, const TensorView** gate, const TensorView** up,
                     const TensorView** down) const;
  // Bytes of all routed experts (the quantity offload budgets are a share of).
  size_t TotalExpertBytes() const;
  // The routed experts' dtypes: "q4_K" when one encodes every layer, "q4_K/q6_K" for one
  // gate-up/down pair, else the distinct pairs ("mixed q4_K, q4_K/q6_K").
  std::string ExpertDTypeLabel() const;
  int NumMoeLayers() const;
};

// Opens an HF checkpoint directory (config.json + safetensors) or a .gguf file and resolves
// every tensor, checking shapes. Throws Error with the offending name on any problem.
std::unique_ptr<Model> LoadModel(const std::string& path);

// Builds a Model from an already-open weight source (used by tests and GGUF loading).
std::unique_ptr<Model> BuildModel(const std::string& path, const ModelConfig& config,
                                  std::unique_ptr<WeightSource> weights);

}  // namespace moex

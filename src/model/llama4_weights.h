// HF Llama 4 checkpoints present their language model differently from what moex reads
// (model/arch/llama4.cc's TensorNames):
// - Llama4ForConditionalGeneration keeps it under "language_model." (language_model.model.*,
//   language_model.lm_head.weight) beside the vision tower (vision_model.*,
//   multi_modal_projector.*, never read);
// - each layer's routed experts are fused, in the orientation of `x @ W`:
//     feed_forward.experts.gate_up_proj [E, d, 2F]  gate = the first F columns, up = the rest,
//     feed_forward.experts.down_proj    [E, F, d];
// - q_proj and k_proj rows pair each head's values for RoPE as (2i, 2i + 1) (HF's complex
//   rotation), where moex rotates (i, i + head_dim / 2).
// This source presents the checkpoint as moex reads it: names without the prefix, per-expert
// HF Linear matrices (gate/up [F, d], down [d, F]) copied in the stored dtype on first use,
// and q/k weights (and biases) with each head's rows reordered (row j * head_dim / 2 + i from
// row 2i + j, the inverse of llama.cpp's permutation: its GGUF stores HF's order). Attention
// scores are unchanged: q and k get the same order, and the weightless q/k norm does not
// depend on it. Every other tensor passes through.
#pragma once

#include <memory>

#include "io/weight_source.h"
#include "model/hf_checkpoint.h"
#include "model/model_config.h"

namespace moex {

// Throws Error naming the tensor when a fused tensor has the wrong shape or a block dtype,
// or when a tensor is stored both fused and on its own.
std::unique_ptr<WeightSource> WrapLlama4HfWeights(std::unique_ptr<HfCheckpoint> hf,
                                                  const ModelConfig& config);

}  // namespace moex

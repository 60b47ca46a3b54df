// HF Qwen3.5-MoE checkpoints (Qwen3_5MoeForConditionalGeneration) keep the text model under
// model.language_model.* (model.embed_tokens -> model.language_model.embed_tokens, ...;
// lm_head.weight stays) beside a vision tower (model.visual.*) and the MTP layers (mtp.*),
// and store each layer's routed experts fused:
//   mlp.experts.gate_up_proj [E, 2F, d]  expert e's gate rows, then its up rows,
//   mlp.experts.down_proj    [E, d, F].
// This source presents the text model under the names every family shares
// (model.layers.{i}..., TensorNames): the fused experts as per-expert views
// mlp.experts.{e}.gate_proj/up_proj/down_proj.weight (no copy: each is a contiguous
// slice), per-expert tensors as they are. The vision tower and the MTP layers are not
// presented (moex runs the text model; a log line counts them).
#pragma once

#include <memory>

#include "io/weight_source.h"
#include "model/model_config.h"

namespace moex {

// Throws Error naming the tensor when a fused tensor's shape does not match the config or
// its dtype is a block format.
std::unique_ptr<WeightSource> WrapQwen35HfWeights(std::unique_ptr<WeightSource> hf,
                                                  const ModelConfig& config);

}  // namespace moex

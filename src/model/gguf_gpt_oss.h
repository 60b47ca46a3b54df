// llama.cpp's "gpt-oss" GGUF architecture on both sides of the GGUF adapter
// (gguf_model_reader.cc, gguf_model_writer.cc, whose keys arch/gpt_oss.cc reads and
// writes): its keys and the tensors whose names have no one-to-one HF stem.
//
// Keys (llama.cpp's meaning): attention.sliding_window (required; llama.cpp makes every
// even layer a sliding one, set_swa_pattern(2), which is HF's default layer_types),
// expert_feed_forward_length (F; feed_forward_length is the same size), rope.scaling.type
// = yarn with factor, original_context_length and yarn_beta_fast / yarn_beta_slow
// (defaults 32 / 1). llama.cpp hard-codes the activation's limit 7 and has no key for
// HF's rope_scaling.truncate (gpt-oss configs say false); moex writes its own
// gpt-oss.swiglu_limit and gpt-oss.rope.scaling.yarn_truncate only when they differ from
// those and reads them back.
//
// Tensors: blk.N.attn_sinks.weight is HF's self_attn.sinks (no suffix there); the
// post-attention norm is blk.N.post_attention_norm; the expert biases are the _exps
// tensors' .bias (gate and up already de-interleaved, as TensorNames' per-layer biases).
#pragma once

namespace moex::gguf_gpt_oss {

inline constexpr const char* kArch = "gpt-oss";
inline constexpr const char* kHfSinks = "self_attn.sinks";  // Under model.layers.{i}.
inline constexpr const char* kGgufSinks = "attn_sinks";     // Under blk.{i}., + ".weight".

}  // namespace moex::gguf_gpt_oss

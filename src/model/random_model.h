// `moex random-model`: writes an HF checkpoint directory (or GGUF) with random weights in a
// real architecture's shape: tiny (for tests), small (for quick speed work) or full (the
// published shape, e.g. OLMoE-1B-7B). Weights are a pure function of (seed, tensor name,
// element index), so they are produced in pieces and a 14 GB model never sits in memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/model_config.h"

namespace moex {

enum class ModelSize { kTiny, kSmall, kFull };
ModelSize ParseModelSize(const std::string& name);  // "tiny" | "small" | "full"

// The shape of `arch` at `size` (full = the published checkpoint's config): its family's
// Family::RandomConfig. Phi-3.5-MoE gets LongRoPE with original_max_position_embeddings
// 4096 (full), 512 (small) or 32 (tiny), so that short runs cross the short/long switch.
ModelConfig RandomModelConfig(Arch arch, ModelSize size);
// `published` (a family's PublishedConfig) at `size`: small and tiny keep the topology
// (norms, biases, shared/dense layers, GQA ratio) and the routing fan-out and shrink widths
// and depth; with WithLongRope's factors.
ModelConfig ShrinkToSize(ModelConfig published, ModelSize size);

// Plausible LongRoPE parameters (not any published model's): factors rising from 1 with the
// frequency index, to 1.5 (short) and to max / original (long); short_mscale 1 and
// long_mscale = sqrt(1 + ln(max / original) / ln(original)), HF's default.
LongRope MakeLongRope(int head_dim, int max_position_embeddings, int original);
// `c` with LongRoPE (MakeLongRope, original_max_position_embeddings = `original`) and
// sliding_window = max_position_embeddings when it is a phimoe config; else `c` unchanged.
ModelConfig WithLongRope(ModelConfig c, int original);

struct RandomModelOptions {
  ModelConfig config;
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  std::string out;  // Directory for "hf", file path for "gguf".
  std::string format = "hf";
  // Optional tokenizer.json to ship with the model (its vocabulary size must fit).
  std::string tokenizer_json;
  // For "hf" without tokenizer_json: ship a byte-level tokenizer sized to the vocabulary
  // (text/byte_tokenizer_json.h), so text prompts and --chat work on the model.
  bool byte_tokenizer = false;
  // For "gguf": a GGUF whose tokenizer.* metadata is copied in (so llama.cpp can load it).
  std::string gguf_vocab;
  // For "gguf": quantise weight matrices and routed experts to this block format (q8_0,
  // q4_K, mxfp4, ...; see GgufWriteOptions::quantize). The values are drawn in `dtype` first.
  std::optional<DType> gguf_type;
  // With gguf_type q4_K: llama-quantize's Q4_K_M mix (GgufWriteOptions::q4_k_m).
  bool gguf_q4_k_m = false;
  // gpt_oss, "hf": store the routed experts as the published openai/gpt-oss checkpoints do,
  // MXFP4 _blocks/_scales with quantization_config (model/gpt_oss_weights.h). The values are
  // drawn in `dtype` and quantised as --gguf-type mxfp4 would quantise them.
  bool hf_mxfp4 = false;
  // "hf", > 0: store every Linear weight but the router and the LM head as block-scaled FP8
  // with blocks of hf_fp8_block x hf_fp8_block (quantization_config fp8, model/hf_fp8.h),
  // as DeepSeek-V3 publishes its checkpoints (Qwen3.5: its routed experts one by one, as its
  // FP8 releases store them). The values are drawn in `dtype` first.
  int hf_fp8_block = 0;
  uint64_t max_shard_bytes = 4ull << 30;
};

void WriteRandomModel(const RandomModelOptions& options);

}  // namespace moex

// config.json's quantization_config, as HF transformers writes it for gpt-oss's published
// checkpoints: {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
// "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}. The routed experts of every
// layer the list does not cover are stored as MXFP4 _blocks/_scales (model/gpt_oss_weights.h).
// Or block-scaled FP8, as DeepSeek-V3/R1, MiniMax-M2 and Qwen3.5 publish theirs:
// {"quant_method": "fp8", "fmt": "float8_e4m3fn", "activation_scheme": "dynamic",
// "weight_block_size": [128, 128]} (model/hf_fp8.h).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace moex {

struct HfQuantization {
  std::string quant_method;  // "mxfp4" (gpt-oss) or "fp8" (model/hf_fp8.h).
  std::vector<std::string> modules_to_not_convert;
  // fp8: weight_block_size, the rows and columns one weight_scale_inv value covers.
  std::array<int, 2> weight_block{};

  // The entry of modules_to_not_convert that covers `module` (a dotted module name such as
  // "model.layers.3.mlp.experts"), or nullopt. An entry is a pattern where '*' stands for any
  // characters; it covers the modules it matches and everything inside them. A module whose
  // `children` are all covered (by one entry or several) counts as covered too.
  std::optional<std::string> NotConverted(const std::string& module,
                                          const std::vector<std::string>& children = {}) const;
  // An entry that covers some of `module`'s children but, with the others, not all of them.
  std::optional<std::string> CoversPartOf(const std::string& module,
                                          const std::vector<std::string>& children) const;
};

// nullopt when config.json has no quantization_config (or null). Throws Error for a
// quant_method other than "mxfp4" and "fp8", mxfp4 on an architecture other than gpt_oss,
// fp8 other than e4m3 with dynamic activations and a weight_block_size, or fields of the
// wrong type.
std::optional<HfQuantization> ParseHfQuantization(const nlohmann::json& config, Arch arch);

}  // namespace moex

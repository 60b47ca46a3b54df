// config.json's quantization_config, as HF transformers writes it for gpt-oss's published
// checkpoints: {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
// "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}. The routed experts of every
// layer the list does not cover are stored as MXFP4 _blocks/_scales (model/gpt_oss_weights.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace moex {

struct HfQuantization {
  std::string quant_method;  // "mxfp4", the only one moex reads.
  std::vector<std::string> modules_to_not_convert;

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
// quant_method other than "mxfp4", a quantization_config on an architecture other than
// gpt_oss, or fields of the wrong type.
std::optional<HfQuantization> ParseHfQuantization(const nlohmann::json& config, Arch arch);

}  // namespace moex

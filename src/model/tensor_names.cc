#include "model/tensor_names.h"

namespace moex {

std::string TensorNames::Expert(int layer, int expert, ExpertMatrix which) const {
  const std::string& pattern = which == ExpertMatrix::kGate ? expert_gate
                               : which == ExpertMatrix::kUp ? expert_up
                                                            : expert_down;
  std::string name = pattern;
  const auto pos = name.find("{e}");
  name.replace(pos, 3, std::to_string(expert));
  return Layer(layer, name);
}

TensorNames TensorNamesFor(const ModelConfig& config) {
  switch (config.arch) {
    case Arch::kMixtral:
    case Arch::kPhiMoe: return MixtralTensorNames();
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe: return QwenMoeTensorNames();
    case Arch::kOlmoe: return OlmoeTensorNames();
    case Arch::kDeepseekMoe: return DeepseekMoeTensorNames();
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3: return DeepseekMlaTensorNames();
    case Arch::kGlm4Moe: return Glm4MoeTensorNames();
    case Arch::kGptOss: return GptOssTensorNames();
  }
  return TensorNames{};
}

}  // namespace moex

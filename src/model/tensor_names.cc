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
    case Arch::kMixtral: {
      // llama.cpp's llama graph applies the experts' scales; its phimoe graph does not.
      TensorNames n = MixtralTensorNames();
      n.expert_gate_scale = "block_sparse_moe.experts.w1.scale";
      n.expert_up_scale = "block_sparse_moe.experts.w3.scale";
      n.expert_down_scale = "block_sparse_moe.experts.w2.scale";
      return n;
    }
    case Arch::kPhiMoe: return MixtralTensorNames();
    case Arch::kQwen3Moe: {
      TensorNames n = QwenMoeTensorNames();  // As Mixtral: qwen3moe applies them.
      n.expert_gate_scale = "mlp.experts.gate_proj.scale";
      n.expert_up_scale = "mlp.experts.up_proj.scale";
      n.expert_down_scale = "mlp.experts.down_proj.scale";
      return n;
    }
    case Arch::kQwen2Moe: return QwenMoeTensorNames();
    case Arch::kOlmoe: return OlmoeTensorNames();
    case Arch::kDeepseekMoe: return DeepseekMoeTensorNames();
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3: return DeepseekMlaTensorNames();
    case Arch::kGlm4Moe: return Glm4MoeTensorNames();
    case Arch::kGptOss: return GptOssTensorNames();
    case Arch::kMiniMaxM2:
      return MiniMaxM2TensorNames();
  }
  return TensorNames{};
}

}  // namespace moex

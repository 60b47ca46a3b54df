#include "model/tensor_names.h"

#include "model/arch/family.h"

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
  return FamilyOf(config.arch).HfTensorNames();
}

}  // namespace moex

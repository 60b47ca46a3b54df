// An independent reference forward pass for tests: plain loops in double precision over the
// checkpoint's tensors, sharing no kernel code with the engine. Slow and obviously correct.
#pragma once

#include <cstdint>
#include <vector>

#include "io/weight_source.h"
#include "model/model_config.h"

namespace moex::testing {

// Logits [tokens.size(), vocab] for one sequence starting at position 0.
std::vector<double> ReferenceLogits(const ModelConfig& config, const WeightSource& weights,
                                    const std::vector<int32_t>& tokens);

}  // namespace moex::testing

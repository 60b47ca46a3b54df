// The two runs the losslessness tests compare between executors: prefill logits of one
// prompt, and greedy tokens of two batched requests of different lengths.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/moe_executor.h"
#include "model/model.h"

namespace moex::testing {

// Logits of every position of `ids`, one forward pass.
std::vector<float> PrefillLogits(const Model& model, MoeExecutor& executor,
                                 const std::vector<int32_t>& ids);
// Greedy tokens of two requests generated together (10 and 7 tokens).
std::vector<std::vector<int32_t>> GreedyTokens(const Model& model, MoeExecutor& executor);

}  // namespace moex::testing

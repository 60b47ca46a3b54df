// The two runs the losslessness tests compare between executors: prefill logits of one
// prompt, and greedy tokens of two batched requests of different lengths; and a small
// recorded trace for policies that learn.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/moe_executor.h"
#include "model/model.h"

namespace moex::testing {

// Logits of every position of `ids`, one forward pass.
std::vector<float> PrefillLogits(const Model& model, MoeExecutor& executor,
                                 const std::vector<int32_t>& ids);
// PrefillLogits of `model` offloaded to the store at `store_path` with `policy` at `budget`.
std::vector<float> OffloadedPrefillLogits(const Model& model, const std::vector<int32_t>& ids,
                                          const std::string& store_path, const char* budget,
                                          const char* policy = "lru");
// Greedy tokens of two requests generated together (10 and 7 tokens).
std::vector<std::vector<int32_t>> GreedyTokens(const Model& model, MoeExecutor& executor);

// Records a routing trace of the resident model at `path` for learning policies
// (--learn-from): requests of 8 and 3 prompt tokens generated together (12 and 9 tokens),
// then the second alone.
void RecordLearningTrace(const Model& model, const std::string& path);

}  // namespace moex::testing

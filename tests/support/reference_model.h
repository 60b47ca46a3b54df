// An independent reference forward pass for tests: plain loops in double precision over the
// checkpoint's tensors, sharing no kernel code with the engine. Slow and obviously correct.
#pragma once

#include <cstdint>
#include <vector>

#include "io/weight_source.h"
#include "model/model_config.h"

namespace moex::testing {

// Logits [tokens.size(), vocab] for one sequence starting at position 0.
// `passes` splits the sequence into forward passes (sizes summing to tokens.size(); empty:
// one pass). It matters only for LongRoPE, which HF chooses per pass: every token of a pass
// that ends at length L uses the long factors iff L > original_max_position_embeddings,
// and keys keep the rotation of the pass that computed them.
std::vector<double> ReferenceLogits(const ModelConfig& config, const WeightSource& weights,
                                    const std::vector<int32_t>& tokens,
                                    const std::vector<int64_t>& passes = {});

// How far engine logits are from the reference: the largest absolute difference, and the
// logit scale (the largest |reference| logit, at least 1) tolerances are relative to.
struct LogitGap {
  double max_err = 0;
  double scale = 1;
};
LogitGap CompareLogits(const std::vector<float>& got, const std::vector<double>& ref);

// Sparsemixer top-2 routing (HF `sparsemixer`, eval mode) in double precision, written out
// from its definition: returns {i1, i2} and their weights.
void ReferenceSparseMixer(const std::vector<double>& scores, double jitter_eps, int ids[2],
                          double weights[2]);

}  // namespace moex::testing

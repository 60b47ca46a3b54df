// Token sampling: greedy (temperature 0), or temperature with top-k and top-p (nucleus)
// filtering, from a per-sequence seeded generator so runs are reproducible.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace moex {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy.
  int top_k = 0;             // 0 = no limit.
  float top_p = 1.0f;        // 1 = no nucleus filtering.
  uint64_t seed = 0;
  // OpenAI's penalties over the tokens generated so far (not the prompt, as vLLM):
  // logit -= frequency_penalty * count + presence_penalty * (count > 0).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to a token's logit before sampling (OpenAI's logit_bias, -100..100).
  std::vector<std::pair<int32_t, float>> logit_bias = {};

  void Validate() const;  // Throws Error for out-of-range values.
  bool AdjustsLogits() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || !logit_bias.empty();
  }
};

// Applies the penalties and logit_bias of `params` to `logits`, given the tokens generated so
// far. Ids outside the logits are ignored.
void AdjustLogits(const SamplingParams& params, std::span<const int32_t> generated,
                  std::span<float> logits);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t Sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

// Index of the largest value; ties go to the lowest index.
int32_t ArgMax(std::span<const float> logits);

// Throws Error naming the first NaN or infinite logit: they come from broken weights or
// configs, and sampling them would give garbage tokens without a word. Callers that must
// not throw mid-pass (the server's scheduler) decide how to fail the request.
void CheckFiniteLogits(std::span<const float> logits);

}  // namespace moex

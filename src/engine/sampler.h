// Token sampling: greedy (temperature 0), or temperature with top-k, top-p (nucleus) and
// min-p filtering, in Hugging Face's order (temperature first, then top-k, top-p, min-p), from
// a per-sequence seeded generator so runs are reproducible. Penalties and logit_bias adjust
// the logits before (AdjustLogits).
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
  float min_p = 0.0f;  // Drop tokens below min_p x the most likely one's probability.
  // llama.cpp's and Hugging Face's repetition penalty over the context's last
  // repeat_last_n tokens (prompt included; -1: the whole context): a seen token's logit is
  // divided by it when positive, multiplied when negative. 1 = off.
  float repetition_penalty = 1.0f;
  int repeat_last_n = 64;
  // OpenAI's penalties over the tokens generated so far (not the prompt, as vLLM):
  // logit -= frequency_penalty * count + presence_penalty * (count > 0).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to a token's logit before sampling (OpenAI's logit_bias, -100..100).
  std::vector<std::pair<int32_t, float>> logit_bias = {};

  void Validate() const;  // Throws Error for out-of-range values.
  bool AdjustsLogits() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || !logit_bias.empty() ||
           (repetition_penalty != 1.0f && repeat_last_n != 0);
  }
};

// Applies the penalties and logit_bias of `params` to `logits`, given the sequence so far:
// `context` is the prompt (its first prompt_tokens ids) followed by the generated tokens.
// Ids outside the logits are ignored.
void AdjustLogits(const SamplingParams& params, std::span<const int32_t> context,
                  size_t prompt_tokens, std::span<float> logits);

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

// Log probabilities of a sampled token and of the most likely alternatives, as OpenAI's
// `logprobs` / `top_logprobs` report them. They are taken from the model's own distribution
// (log-softmax of the raw logits, before temperature, penalties, logit_bias and any grammar
// mask), as vLLM reports them by default: what the model thought, not what the sampler drew
// from (docs/serving.md).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace moex {

struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0.0f;
  // The `top` most likely tokens, most likely first (ties: lower id first).
  std::vector<std::pair<int32_t, float>> top;
};

// `token`'s log probability under softmax(`logits`) and the `top` most likely tokens' (top
// is clamped to the vocabulary). The logits must be finite.
TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int top);

}  // namespace moex

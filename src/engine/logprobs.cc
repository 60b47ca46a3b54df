#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moex {

TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int top) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
  // Relative to the largest logit, so a logit of 1000 keeps its precision.
  const double log_sum = std::log(sum);
  auto logprob = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - max - log_sum);
  };
  TokenLogprobs out;
  out.token = token;
  out.logprob = logprob(token);
  const size_t n = std::min(static_cast<size_t>(std::max(top, 0)), logits.size());
  if (n == 0) return out;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n), ids.end(),
                    [&](int32_t a, int32_t b) {
                      const float x = logits[static_cast<size_t>(a)];
                      const float y = logits[static_cast<size_t>(b)];
                      return x > y || (x == y && a < b);
                    });
  out.top.reserve(n);
  for (size_t i = 0; i < n; ++i)
    out.top.emplace_back(ids[i], logprob(ids[i]));
  return out;
}

}  // namespace moex

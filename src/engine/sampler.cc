#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moex {

void SamplingParams::Validate() const {
  Check(std::isfinite(temperature) && temperature >= 0.0f, "temperature must be >= 0, got ",
        temperature);
  Check(top_k >= 0, "top-k must be >= 0, got ", top_k);
  Check(top_p > 0.0f && top_p <= 1.0f, "top-p must be in (0, 1], got ", top_p);
  Check(min_p >= 0.0f && min_p <= 1.0f, "min-p must be in [0, 1], got ", min_p);
  Check(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f,
        "repetition penalty must be > 0, got ", repetition_penalty);
  Check(repeat_last_n >= -1, "repeat-last-n must be -1 (the whole context) or >= 0, got ",
        repeat_last_n);
  Check(std::isfinite(presence_penalty) && std::isfinite(frequency_penalty),
        "penalties must be finite");
  for (const auto& [id, bias] : logit_bias)
    Check(std::isfinite(bias), "logit bias of token ", id, " must be finite");
}

namespace {

// Calls visit(id, count) once per distinct id of `tokens` that indexes `logits`, from a
// sorted copy (no vocabulary-sized table).
template <typename Visit>
void ForEachDistinct(std::span<const int32_t> tokens, size_t vocab, Visit&& visit) {
  std::vector<int32_t> sorted(tokens.begin(), tokens.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    if (sorted[i] >= 0 && static_cast<size_t>(sorted[i]) < vocab)
      visit(static_cast<size_t>(sorted[i]), j - i);
    i = j;
  }
}

}  // namespace

void AdjustLogits(const SamplingParams& params, std::span<const int32_t> context,
                  size_t prompt_tokens, std::span<float> logits) {
  prompt_tokens = std::min(prompt_tokens, context.size());
  if (params.repetition_penalty != 1.0f && params.repeat_last_n != 0) {
    const size_t window = params.repeat_last_n < 0
                              ? context.size()
                              : std::min(context.size(), static_cast<size_t>(params.repeat_last_n));
    ForEachDistinct(context.last(window), logits.size(), [&](size_t id, size_t) {
      float& l = logits[id];
      l = l > 0.0f ? l / params.repetition_penalty : l * params.repetition_penalty;
    });
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    ForEachDistinct(context.subspan(prompt_tokens), logits.size(), [&](size_t id, size_t count) {
      logits[id] -= params.frequency_penalty * static_cast<float>(count) + params.presence_penalty;
    });
  }
  for (const auto& [id, bias] : params.logit_bias)
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] += bias;
}

int32_t ArgMax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  params_.Validate();
}

void CheckFiniteLogits(std::span<const float> logits) {
  for (size_t i = 0; i < logits.size(); ++i)
    Check(std::isfinite(logits[i]), "the model produced a non-finite logit (", logits[i],
          " for token ", i, "): its weights or configuration are broken");
}

int32_t Sampler::Sample(std::span<const float> logits) {
  if (params_.temperature == 0.0f) return ArgMax(logits);
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    candidates_[i] = {logits[i] / params_.temperature, static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  // Only top-k and top-p need an order; a plain draw (or min-p, which needs only the
  // maximum) scans the vocabulary as it is, which a 150k-token vocabulary's sort would not.
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < candidates_.size()) {
    const auto kth = candidates_.begin() + params_.top_k;
    std::partial_sort(candidates_.begin(), kth, candidates_.end(), by_logit);
    candidates_.resize(static_cast<size_t>(params_.top_k));
  } else if (params_.top_p < 1.0f) {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  float max_logit = candidates_.front().first;
  for (const auto& c : candidates_) max_logit = std::max(max_logit, c.first);
  // Softmax weights relative to the most likely token's (which has 1).
  double sum = 0.0;
  for (auto& c : candidates_) {
    c.first = std::exp(c.first - max_logit);
    sum += c.first;
  }
  if (params_.top_p < 1.0f) {  // candidates_ is sorted: cut the tail beyond top_p of the mass.
    double cumulative = 0.0;
    size_t cut = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += candidates_[i].first / sum;
      if (cumulative >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    candidates_.resize(cut);
    sum = 0.0;
    for (const auto& c : candidates_) sum += c.first;
  }
  if (params_.min_p > 0.0f) {
    std::erase_if(candidates_, [&](const auto& c) { return c.first < params_.min_p; });
    sum = 0.0;
    for (const auto& c : candidates_) sum += c.first;
  }
  std::uniform_real_distribution<double> uniform(0.0, sum);
  double r = uniform(rng_);
  int32_t last = -1;
  for (const auto& c : candidates_) {
    if (c.first <= 0.0f) continue;  // Masked (-inf) logits: never drawn.
    last = c.second;
    r -= c.first;
    if (r <= 0.0) return c.second;
  }
  return last >= 0 ? last : ArgMax(logits);  // Rounding left r above 0: the last with weight.
}

}  // namespace moex

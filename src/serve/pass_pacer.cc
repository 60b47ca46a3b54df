#include "serve/pass_pacer.h"

#include <algorithm>

#include "core/dcheck.h"

namespace moex::serve {
namespace {

void Blend(std::optional<double>& mean, double value, double weight) {
  mean = mean ? (1 - weight) * *mean + weight * value : value;
}

}  // namespace

PassPacer::PassPacer(double target_ms, int window_passes)
    : target_ms_(target_ms), max_slack_ms_(target_ms * window_passes) {
  MOEX_DCHECK(target_ms >= 0 && window_passes >= 1, "target ", target_ms, " ms over ",
              window_passes, " passes");
}

std::optional<double> PassPacer::Predict(int64_t decode_tokens, int64_t prefill_tokens) const {
  double ms = 0;
  if (decode_tokens > 0) {
    if (!decode_pass_ms_) return std::nullopt;
    ms += *decode_pass_ms_;
  }
  if (prefill_tokens > 0) {
    if (!prefill_token_ms_) return std::nullopt;
    ms += *prefill_token_ms_ * static_cast<double>(prefill_tokens);
  }
  return ms;
}

bool PassPacer::AllowsPrefill(int64_t decode_tokens, int64_t prefill_tokens) const {
  if (!enabled() || decode_tokens == 0 || prefill_tokens == 0) return true;
  const std::optional<double> ms = Predict(decode_tokens, prefill_tokens);
  if (!ms) return true;                             // Nothing learnt yet.
  if (*decode_pass_ms_ >= target_ms_) return true;  // Unattainable: do not starve prompts.
  if (slack_ms_ >= max_slack_ms_) return true;      // A whole window banked.
  return *ms <= target_ms_ + slack_ms_;
}

void PassPacer::Observe(int64_t decode_tokens, int64_t prefill_tokens, double ms) {
  if (prefill_tokens == 0) {
    if (decode_tokens > 0) Blend(decode_pass_ms_, ms, kWeight);
  } else {
    const double decode_ms = decode_tokens > 0 && decode_pass_ms_ ? *decode_pass_ms_ : 0;
    Blend(prefill_token_ms_, std::max(0.0, ms - decode_ms) / static_cast<double>(prefill_tokens),
          kWeight);
  }
  if (enabled() && decode_tokens > 0)
    slack_ms_ = std::clamp(slack_ms_ + target_ms_ - ms, -max_slack_ms_, max_slack_ms_);
}

}  // namespace moex::serve

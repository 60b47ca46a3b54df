// Time per output token (TPOT) as a priority: with a target of T ms, the scheduler holds a
// prefill chunk back from a pass with running decodes when that pass would make the decodes'
// average time per token exceed T, so a burst of new prompts costs the running requests
// bounded latency instead of several slow passes in a row (vLLM's and SGLang's schedulers
// bound the prefill tokens of a mixed pass for the same reason; here the bound is in time).
//
// The pacer keeps a slack: after every pass that decoded, slack += T - (the pass's wall
// time), kept within +-window*T so old passes are forgotten. A pass may add prefill when its
// predicted time is at most T + slack. Two rules keep every prompt moving: prefill is always
// allowed once the slack is full (then fast decode-only passes have banked a whole window),
// and when decode-only passes alone take T or more (the target cannot be met) prefill is not
// held back at all.
//
// Predictions come from the passes themselves: an exponentially weighted mean of decode-only
// pass time, and of the time per prompt token in passes that prefilled (pass time minus the
// decode-only mean, over the prompt tokens). Before the first observation of a kind nothing
// is held back. Not thread-safe: one owner (the scheduler thread).
#pragma once

#include <cstdint>
#include <optional>

namespace moex::serve {

class PassPacer {
 public:
  // target_ms 0 turns pacing off. REQUIRES: target_ms >= 0, window_passes >= 1.
  explicit PassPacer(double target_ms, int window_passes = 16);

  bool enabled() const { return target_ms_ > 0; }
  // Whether a pass with `decode_tokens` decodes may also prefill `prefill_tokens` tokens.
  bool AllowsPrefill(int64_t decode_tokens, int64_t prefill_tokens) const;
  // Records a pass that ran, with its wall time.
  void Observe(int64_t decode_tokens, int64_t prefill_tokens, double ms);

  // The predicted wall time of such a pass; nullopt while a needed mean is unknown.
  std::optional<double> Predict(int64_t decode_tokens, int64_t prefill_tokens) const;
  double slack_ms() const { return slack_ms_; }

 private:
  static constexpr double kWeight = 0.25;  // Of the newest pass in each mean.

  double target_ms_;
  double max_slack_ms_;
  double slack_ms_ = 0;
  std::optional<double> decode_pass_ms_;    // Mean decode-only pass time.
  std::optional<double> prefill_token_ms_;  // Mean time per prompt token.
};

}  // namespace moex::serve

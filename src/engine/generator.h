// Batched generation: all prompts are prefilled together, then every unfinished sequence
// advances one token per forward pass until it meets a stop token or its token limit. Each
// request is bracketed by request_begin / request_end events, also when a pass fails.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "engine/transformer.h"

namespace moex {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // Generation ends after emitting one of these.
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // Generated tokens (the stop token included if one ended it).
  std::string finish_reason;    // "stop", "length" or "cancelled" (set_stop_check).
  double ttft_ms = 0;           // Request start to its first generated token.
};

struct GenerationTimings {
  double prefill_ms = 0;
  double decode_ms = 0;
  int64_t prompt_tokens = 0;
  int64_t decode_steps = 0;      // Forward passes after prefill.
  int64_t generated_tokens = 0;  // Over all sequences.
};

class Generator {
 public:
  // on_token(request index, token) is called as each token is produced.
  using TokenCallback = std::function<void(size_t, int32_t)>;

  explicit Generator(Transformer& transformer, int64_t max_prefill_chunk = 512);
  std::vector<GenerationResult> Generate(const std::vector<GenerationRequest>& requests,
                                         const TokenCallback& on_token = {});
  const GenerationTimings& timings() const { return timings_; }
  // Asked between forward passes (a signal handler's flag, say): when it returns true the
  // sequences still running end with finish reason "cancelled", keeping their tokens so far.
  void set_stop_check(std::function<bool()> stop) { stop_ = std::move(stop); }

 private:
  struct Sequences;
  void Run(Sequences& s, const TokenCallback& on_token);
  void End(Sequences& s, size_t i);  // request_end, once.

  Transformer& transformer_;
  int64_t max_prefill_chunk_;
  std::function<bool()> stop_;
  GenerationTimings timings_;
};

}  // namespace moex

#include "engine/generator.h"

#include <algorithm>
#include <memory>

#include "core/clock.h"
#include "core/error.h"

namespace moex {

Generator::Generator(Transformer& transformer, int64_t max_prefill_chunk)
    : transformer_(transformer), max_prefill_chunk_(max_prefill_chunk) {}

std::vector<GenerationResult> Generator::Generate(const std::vector<GenerationRequest>& requests,
                                                  const TokenCallback& on_token) {
  const ModelConfig& config = transformer_.model().config;
  const size_t n = requests.size();
  timings_ = GenerationTimings{};
  std::vector<GenerationResult> results(n);
  std::vector<std::unique_ptr<KvCache>> caches(n);
  std::vector<Sampler> samplers;
  samplers.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const GenerationRequest& r = requests[i];
    Check(!r.prompt.empty(), "request ", i, ": the prompt is empty");
    Check(r.max_tokens >= 0, "request ", i, ": max tokens must be >= 0");
    const int64_t needed = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
    Check(needed <= config.max_position_embeddings, "request ", i, ": prompt (",
          r.prompt.size(), " tokens) plus max tokens (", r.max_tokens,
          ") exceeds the model's context of ", config.max_position_embeddings, " tokens");
    caches[i] = std::make_unique<KvCache>(config, needed);
    samplers.emplace_back(r.sampling);
    timings_.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  }

  // Prefill in chunks of at most max_prefill_chunk_ tokens per forward pass; the logits of
  // each prompt's last chunk give its first token.
  const Stopwatch start;
  std::vector<int32_t> next(n, -1);
  std::vector<size_t> offset(n, 0);
  std::vector<bool> active(n, false);
  for (;;) {
    std::vector<BatchItem> batch;
    std::vector<size_t> owners;
    int64_t budget = max_prefill_chunk_;
    for (size_t i = 0; i < n && budget > 0; ++i) {
      const auto& prompt = requests[i].prompt;
      if (offset[i] >= prompt.size()) continue;
      const size_t take = std::min<size_t>(prompt.size() - offset[i], static_cast<size_t>(budget));
      batch.push_back({caches[i].get(), std::span<const int32_t>(prompt).subspan(offset[i], take), false});
      owners.push_back(i);
      offset[i] += take;
      budget -= static_cast<int64_t>(take);
    }
    if (batch.empty()) break;
    std::vector<float> logits = transformer_.Forward(batch);
    for (size_t b = 0; b < owners.size(); ++b) {
      const size_t i = owners[b];
      if (offset[i] < requests[i].prompt.size()) continue;  // More prompt to go.
      results[i].ttft_ms = start.ElapsedMs();
      if (requests[i].max_tokens == 0) {
        results[i].finish_reason = "length";
        continue;
      }
      const std::span<const float> row(&logits[b * static_cast<size_t>(config.vocab_size)],
                                       static_cast<size_t>(config.vocab_size));
      next[i] = samplers[i].Sample(row);
      active[i] = true;
    }
  }
  timings_.prefill_ms = start.ElapsedMs();

  const Stopwatch decode;
  for (;;) {
    // Record each active sequence's newest token; retire those that are finished.
    std::vector<BatchItem> batch;
    std::vector<size_t> owners;
    for (size_t i = 0; i < n; ++i) {
      if (!active[i]) continue;
      GenerationResult& res = results[i];
      res.tokens.push_back(next[i]);
      ++timings_.generated_tokens;
      if (on_token) on_token(i, next[i]);
      const auto& stops = requests[i].stop_ids;
      if (std::find(stops.begin(), stops.end(), next[i]) != stops.end()) {
        res.finish_reason = "stop";
        active[i] = false;
      } else if (static_cast<int>(res.tokens.size()) >= requests[i].max_tokens) {
        res.finish_reason = "length";
        active[i] = false;
      } else {
        batch.push_back({caches[i].get(), std::span<const int32_t>(&next[i], 1), false});
        owners.push_back(i);
      }
    }
    if (batch.empty()) break;
    std::vector<float> logits = transformer_.Forward(batch);
    ++timings_.decode_steps;
    for (size_t b = 0; b < owners.size(); ++b) {
      const std::span<const float> row(&logits[b * static_cast<size_t>(config.vocab_size)],
                                       static_cast<size_t>(config.vocab_size));
      next[owners[b]] = samplers[owners[b]].Sample(row);
    }
  }
  timings_.decode_ms = decode.ElapsedMs();
  return results;
}

}  // namespace moex

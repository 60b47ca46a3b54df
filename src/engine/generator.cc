#include "engine/generator.h"

#include <algorithm>
#include <memory>

#include "core/clock.h"
#include "core/error.h"

namespace moex {

// The sequences of one Generate call.
struct Generator::Sequences {
  const std::vector<GenerationRequest>& requests;
  std::vector<GenerationResult> results;
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<Sampler> samplers;
  std::vector<int64_t> ids;  // Request ids of the event stream.
  std::vector<float> adjusted;  // A row with its penalties applied (AdjustLogits).
  std::vector<bool> ended;

  size_t size() const { return requests.size(); }
};

Generator::Generator(Transformer& transformer, int64_t max_prefill_chunk)
    : transformer_(transformer), max_prefill_chunk_(max_prefill_chunk) {}

void Generator::End(Sequences& s, size_t i) {
  if (s.ended[i]) return;
  s.ended[i] = true;
  transformer_.EndRequest(s.ids[i]);
}

std::vector<GenerationResult> Generator::Generate(const std::vector<GenerationRequest>& requests,
                                                  const TokenCallback& on_token) {
  const ModelConfig& config = transformer_.model().config;
  const size_t n = requests.size();
  timings_ = GenerationTimings{};
  Sequences s{requests, std::vector<GenerationResult>(n), {}, {}, {}, {},
              std::vector<bool>(n, false)};
  s.samplers.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const GenerationRequest& r = requests[i];
    Check(!r.prompt.empty(), "request ", i, ": the prompt is empty");
    Check(r.max_tokens >= 0, "request ", i, ": max tokens must be >= 0");
    const int64_t needed = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
    Check(needed <= config.max_position_embeddings, "request ", i, ": prompt (", r.prompt.size(),
          " tokens) plus max tokens (", r.max_tokens, ") exceeds the model's context of ",
          config.max_position_embeddings, " tokens");
    s.caches.push_back(std::make_unique<KvCache>(config, needed));
    s.samplers.emplace_back(r.sampling);
    timings_.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  }
  for (size_t i = 0; i < n; ++i) s.ids.push_back(transformer_.BeginRequest(requests[i].prompt));
  try {
    Run(s, on_token);
  } catch (...) {
    // A failed pass (a read error, say) ends every request, so policies drop their state
    // and the next call starts clean.
    for (size_t i = 0; i < n; ++i) End(s, i);
    throw;
  }
  for (size_t i = 0; i < n; ++i) End(s, i);
  return std::move(s.results);
}

void Generator::Run(Sequences& s, const TokenCallback& on_token) {
  const int64_t vocab = transformer_.model().config.vocab_size;
  const size_t n = s.size();
  // Samples sequence i's next token from its row b of the logits, after its penalties.
  std::vector<int32_t> context;
  auto sample = [&](const std::vector<float>& logits, size_t b, size_t i) {
    std::span<const float> row(&logits[b * static_cast<size_t>(vocab)], static_cast<size_t>(vocab));
    CheckFiniteLogits(row);
    const GenerationRequest& r = s.requests[i];
    if (r.sampling.AdjustsLogits()) {
      context.assign(r.prompt.begin(), r.prompt.end());
      context.insert(context.end(), s.results[i].tokens.begin(), s.results[i].tokens.end());
      s.adjusted.assign(row.begin(), row.end());
      AdjustLogits(r.sampling, context, r.prompt.size(), s.adjusted);
      row = s.adjusted;
    }
    return s.samplers[i].Sample(row);
  };

  // Prefill in chunks of at most max_prefill_chunk_ tokens per forward pass; the logits of
  // each prompt's last chunk give its first token.
  const Stopwatch start;
  std::vector<int32_t> next(n, -1);
  std::vector<size_t> offset(n, 0);
  std::vector<bool> active(n, false);
  for (;;) {
    if (stop_ && stop_()) {  // Stopped while prefilling: the rest get no token.
      for (size_t i = 0; i < n; ++i) {
        if (active[i] || s.ended[i]) continue;
        s.results[i].finish_reason = "cancelled";
        End(s, i);
      }
      break;  // Those with a first token keep it (the decode loop ends them).
    }
    std::vector<BatchItem> batch;
    std::vector<size_t> owners;
    int64_t budget = max_prefill_chunk_;
    for (size_t i = 0; i < n && budget > 0; ++i) {
      const auto& prompt = s.requests[i].prompt;
      if (offset[i] >= prompt.size()) continue;
      const size_t take = std::min<size_t>(prompt.size() - offset[i], static_cast<size_t>(budget));
      // rope_length: every chunk rotates as one prefill pass over the whole prompt would.
      batch.push_back({s.caches[i].get(), std::span<const int32_t>(prompt).subspan(offset[i], take),
                       false, s.ids[i], static_cast<int64_t>(prompt.size())});
      owners.push_back(i);
      offset[i] += take;
      budget -= static_cast<int64_t>(take);
    }
    if (batch.empty()) break;
    const std::vector<float> logits = transformer_.Forward(batch);
    // Prefill is the forward passes; a sequence's TTFT also counts sampling its first token,
    // so no TTFT is below the prefill time of the passes it waited for.
    timings_.prefill_ms = start.ElapsedMs();
    for (size_t b = 0; b < owners.size(); ++b) {
      const size_t i = owners[b];
      if (offset[i] < s.requests[i].prompt.size()) continue;  // More prompt to go.
      if (s.requests[i].max_tokens == 0) {
        s.results[i].ttft_ms = start.ElapsedMs();
        s.results[i].finish_reason = "length";
        End(s, i);
        continue;
      }
      next[i] = sample(logits, b, i);
      s.results[i].ttft_ms = start.ElapsedMs();
      active[i] = true;
    }
  }

  const Stopwatch decode;
  for (;;) {
    // Record each active sequence's newest token; retire those that are finished.
    std::vector<BatchItem> batch;
    std::vector<size_t> owners;
    for (size_t i = 0; i < n; ++i) {
      if (!active[i]) continue;
      GenerationResult& res = s.results[i];
      res.tokens.push_back(next[i]);
      ++timings_.generated_tokens;
      if (on_token) on_token(i, next[i]);
      const auto& stops = s.requests[i].stop_ids;
      if (std::find(stops.begin(), stops.end(), next[i]) != stops.end()) {
        res.finish_reason = "stop";
      } else if (static_cast<int>(res.tokens.size()) >= s.requests[i].max_tokens) {
        res.finish_reason = "length";
      } else if (stop_ && stop_()) {
        res.finish_reason = "cancelled";
      } else {
        batch.push_back(
            {s.caches[i].get(), std::span<const int32_t>(&next[i], 1), false, s.ids[i]});
        owners.push_back(i);
        continue;
      }
      active[i] = false;
      End(s, i);
    }
    if (batch.empty()) break;
    const std::vector<float> logits = transformer_.Forward(batch);
    ++timings_.decode_steps;
    for (size_t b = 0; b < owners.size(); ++b)
      next[owners[b]] = sample(logits, b, owners[b]);
  }
  timings_.decode_ms = decode.ElapsedMs();
}

}  // namespace moex

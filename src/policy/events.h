// The policy event stream and decisions (docs/design.md, "The event stream"). The engine emits
// these events; the trace-replay simulator emits the same ones from a trace. Policies see
// nothing else, so both drivers get the same decisions from the same events.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moex::policy {

struct ExpertKey {
  int32_t layer = 0;
  int32_t expert = 0;
  auto operator<=>(const ExpertKey&) const = default;
};

// An expert's slot in a per-expert table, layer after layer (layers x num_experts slots):
// the one key policies index their tables by (over every decoder layer, PolicyFacts).
inline size_t KeyIndex(const ExpertKey& k, int num_experts) {
  return static_cast<size_t>(k.layer) * static_cast<size_t>(num_experts) +
         static_cast<size_t>(k.expert);
}

// Neurons [begin, end) of an expert; end < 0 means "to the last neuron".
struct NeuronRange {
  int32_t begin = 0;
  int32_t end = -1;
};

struct RequestBeginEvent {
  int64_t request = 0;
  const int32_t* prompt = nullptr;  // Prompt token ids.
  int64_t prompt_len = 0;
};

struct IterationBeginEvent {
  int64_t iteration = 0;  // Counts from 0 over the engine's lifetime.
  int64_t n_requests = 0;
  const int64_t* requests = nullptr;      // [n_requests]
  const int64_t* token_counts = nullptr;  // [n_requests] tokens of each request in this pass.
  const int32_t* tokens = nullptr;        // Token ids of this iteration, request after request.
  int64_t n_tokens = 0;
  const float* pooled = nullptr;  // [n_requests, d] mean input embedding per request.
  int64_t d = 0;
};

struct GateEvent {
  int layer = 0;
  int64_t n_tokens = 0;
  int top_k = 0;
  int num_experts = 0;
  const int32_t* ids = nullptr;    // [n_tokens, top_k], descending probability.
  const float* weights = nullptr;  // [n_tokens, top_k] combine weights.
  const float* probs = nullptr;    // [n_tokens, num_experts] full gate probabilities.
  const float* hidden = nullptr;   // [n_tokens, d] the gate's input hidden state.
  int64_t d = 0;
  // The distinct experts of `ids`, ascending: filled once by whoever builds the event
  // (SetRouted), so no listener derives it again.
  const int32_t* routed = nullptr;
  int64_t n_routed = 0;

  std::span<const int32_t> routed_experts() const {
    return {routed, static_cast<size_t>(n_routed)};
  }
};

// Fills e->routed from e->ids, into `storage` (which must outlive the event).
inline void SetRouted(GateEvent* e, std::vector<int32_t>* storage) {
  storage->assign(e->ids, e->ids + e->n_tokens * e->top_k);
  std::sort(storage->begin(), storage->end());
  storage->erase(std::unique(storage->begin(), storage->end()), storage->end());
  e->routed = storage->data();
  e->n_routed = static_cast<int64_t>(storage->size());
}

struct ExpertDoneEvent {
  int layer = 0;
  int expert = 0;
};

struct RequestEndEvent {
  int64_t request = 0;
};

// A request ready to run, as the server's scheduler offers it for regrouping: the tokens it
// would put in the next pass (its next input token when decoding, a prompt chunk when
// prefilling).
struct PassCandidate {
  int64_t request = 0;
  const int32_t* tokens = nullptr;
  int64_t n_tokens = 0;
};

enum class Tier : uint8_t { kHost, kDevice };

// Fetch (part of) an expert into `tier` ahead of need. Higher priority is served first;
// any demand fetch beats every prefetch. The range is honoured at the cache's chunk
// granularity (PolicyFacts::chunk_neurons): every chunk it touches is fetched.
struct Prefetch {
  ExpertKey expert;
  Tier tier = Tier::kHost;
  double priority = 0;
  NeuronRange range;
};

// Change the priority of an expert's queued (not yet started) prefetch transfers.
struct Reprioritize {
  ExpertKey expert;
  double priority = 0;
};

// Keep only `range` of a resident expert (MoEpic's split): chunks outside it leave the
// cache. Chunks in use by the current layer are not touched.
struct Retain {
  ExpertKey expert;
  NeuronRange range;
};

// What a policy asks for in answer to an event, applied in this order: per-layer budgets,
// retains, unpins, prefetches, pins, re-prioritisations, then cancellations (cancel
// abandons an unused prefetched expert: it leaves the cache and its queued reads stop).
struct Decisions {
  std::vector<Prefetch> prefetch;
  std::vector<ExpertKey> cancel;
  std::vector<Reprioritize> reprioritize;
  // Pinned experts are never evicted (while resident) until unpinned.
  std::vector<ExpertKey> pin;
  std::vector<ExpertKey> unpin;
  std::vector<Retain> retain;
  // Bytes of cache per decoder layer (size num_layers; dense layers 0), summing to at most
  // the host budget; empty = no change. Layers shrink at once (evicting by score); a split
  // that cannot be honoured (pinned pages, sum over budget) is refused and counted.
  std::vector<int64_t> layer_budgets;

  bool empty() const {
    return prefetch.empty() && cancel.empty() && reprioritize.empty() && pin.empty() &&
           unpin.empty() && retain.empty() && layer_budgets.empty();
  }
  void Clear() {
    prefetch.clear();
    cancel.clear();
    reprioritize.clear();
    pin.clear();
    unpin.clear();
    retain.clear();
    layer_budgets.clear();
  }
};

}  // namespace moex::policy

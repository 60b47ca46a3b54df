// The deterministic state of one budgeted expert cache: which chunks (neuron ranges) of
// which experts own which pages, pins, per-layer budgets, and eviction. It does no I/O and reads no
// clock; every change is a function of the calls made, so the trace-replay simulator reproduces the
// engine's hits, misses and evictions exactly. The I/O side follows its Commands.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "policy/events.h"

namespace moex::tiers {

using policy::ExpertKey;
using policy::NeuronRange;

struct CacheGeometry {
  int num_layers = 0;  // Decoder layers (keys index layer * num_experts + expert).
  int num_experts = 0;
  int neurons = 0;         // F.
  int chunk_neurons = 0;   // Neurons per chunk (the unit of transfer and of residency).
  int64_t page_bytes = 0;  // Bytes of one page (holds one chunk).
  int64_t capacity_pages = 0;

  int chunks_per_expert() const { return (neurons + chunk_neurons - 1) / chunk_neurons; }
  int ChunkNeurons(int chunk) const {
    const int begin = chunk * chunk_neurons;
    return std::min(chunk_neurons, neurons - begin);
  }
};

// Instructions for the mechanism, to be applied in order.
struct CacheCommand {
  enum Kind : uint8_t {
    kFetch,         // Read chunk of expert into page (new generation).
    kRelease,       // Page left the cache: drop its queued transfers (in-flight ones drain).
    kPromote,       // The expert is now demanded: its queued transfers become demand.
    kReprioritize,  // The expert's queued prefetch transfers take `priority`.
  };
  Kind kind = kFetch;
  ExpertKey expert;
  int chunk = 0;
  int32_t page = -1;
  uint32_t generation = 0;
  bool demand = false;
  double priority = 0;
};

class ExpertCache {
 public:
  using Scorer = std::function<double(const ExpertKey&)>;  // Lower = evicted first.

  explicit ExpertCache(const CacheGeometry& geometry);
  const CacheGeometry& geometry() const { return g_; }

  // Chunks [first, last) that hold neurons of `range` (end < 0: to the last neuron).
  std::pair<int, int> ChunksOf(NeuronRange range) const;

  // Admission (Policy::Admit): asked, when an insert must evict, with the lowest score among
  // the experts it would evict from (its layer's when that layer's budget is what binds);
  // false refuses the insert.
  using Admission = std::function<bool(double lowest_score)>;

  // Makes every chunk of `range` present, evicting unpinned experts (not `key`) by score:
  // within the key's layer first when that layer has a budget it would exceed, then
  // anywhere. All-or-nothing: returns false and changes nothing when there is not enough
  // room or `admit` (may be null: admit everything) refuses. New chunks are emitted as
  // kFetch commands with the given class and priority.
  bool Insert(const ExpertKey& key, NeuronRange range, bool demand, double priority,
              const Scorer& scorer, std::vector<CacheCommand>* out,
              const Admission& admit = nullptr);
  // Drops the expert (all its pages). Pinned experts cannot be removed.
  void Remove(const ExpertKey& key, std::vector<CacheCommand>* out);
  // Drops the chunks outside `range`. False (nothing changes) while the executor uses it.
  bool Retain(const ExpertKey& key, NeuronRange range, std::vector<CacheCommand>* out);

  // Executor pins (counted): an expert in use by the current layer.
  void Pin(const ExpertKey& key);
  void Unpin(const ExpertKey& key);
  bool Pinned(const ExpertKey& key) const;
  // Policy pins (a flag): never evicted while pinned.
  void PolicyPin(const ExpertKey& key, bool pinned);

  // Per decoder layer page budgets (-1: none), summing to at most the capacity. Layers over
  // their new budget shrink at once by score. All-or-nothing: false when the pages to drop
  // are pinned or the sum exceeds the capacity. An empty vector removes every layer budget.
  bool SetLayerBudgets(const std::vector<int64_t>& pages, const Scorer& scorer,
                       std::vector<CacheCommand>* out);
  int64_t layer_budget(int layer) const;
  int64_t used_pages(int layer) const { return used_per_layer_[static_cast<size_t>(layer)]; }
  int64_t peak_used_pages(int layer) const { return peak_per_layer_[static_cast<size_t>(layer)]; }

  bool Present(const ExpertKey& key) const;  // Every chunk present (whole expert).
  int PresentChunks(const ExpertKey& key) const;
  // Page of a chunk, or -1; and the generation its contents must have.
  int32_t PageOf(const ExpertKey& key, int chunk) const;
  uint32_t Generation(int32_t page) const { return generation_[static_cast<size_t>(page)]; }

  // Prefetch bookkeeping: set when a prefetch inserted chunks, cleared by TakeUnused.
  void MarkPrefetched(const ExpertKey& key);
  bool TakeUnused(const ExpertKey& key);  // True (and clears) if prefetched and unused.
  bool Unused(const ExpertKey& key) const;

  int64_t used_pages() const { return g_.capacity_pages - static_cast<int64_t>(free_.size()); }
  int64_t peak_used_pages() const { return peak_used_; }
  // Evicted experts (to make room), per layer of the evicted expert.
  const std::vector<int64_t>& evictions_per_layer() const { return evictions_; }
  // Prefetched experts evicted before any use, per layer, and their chunks.
  const std::vector<int64_t>& wasted_per_layer() const { return wasted_; }
  const std::vector<int64_t>& wasted_chunks_per_layer() const { return wasted_chunks_; }

 private:
  struct Entry {
    std::vector<int32_t> pages;  // Per chunk, -1 = absent.
    int present = 0;
    int pins = 0;
    bool policy_pinned = false;
    bool unused_prefetch = false;
    bool evictable() const { return pins == 0 && !policy_pinned; }
  };
  size_t Index(const ExpertKey& k) const {
    return static_cast<size_t>(k.layer) * static_cast<size_t>(g_.num_experts) +
           static_cast<size_t>(k.expert);
  }
  ExpertKey KeyOf(size_t index) const {
    return {static_cast<int32_t>(index / static_cast<size_t>(g_.num_experts)),
            static_cast<int32_t>(index % static_cast<size_t>(g_.num_experts))};
  }
  int MissingChunks(size_t index, NeuronRange range) const;
  void SortHolders();
  void FreeAll(size_t index, std::vector<CacheCommand>* out);
  void FreeChunk(size_t index, int chunk, std::vector<CacheCommand>* out);
  // Evicts unpinned experts (never `keep`) so that `layer` frees `layer_need` pages and the
  // cache `global_need`; all-or-nothing, and nothing when `admit` refuses.
  bool MakeRoom(size_t keep, int layer, int64_t layer_need, int64_t global_need,
                const Scorer& scorer, std::vector<CacheCommand>* out,
                const Admission& admit = nullptr);
  int LayerOf(size_t index) const {
    return static_cast<int>(index / static_cast<size_t>(g_.num_experts));
  }

  CacheGeometry g_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> generation_;  // Per page.
  // Lowest free page first, so page choice is deterministic.
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> free_;
  std::vector<size_t> holders_;  // Indices of entries with at least one page (sorted lazily).
  int64_t peak_used_ = 0;
  std::vector<int64_t> used_per_layer_, peak_per_layer_;
  std::vector<int64_t> layer_budget_;  // Pages per layer, -1 = none.
  std::vector<int64_t> evictions_;
  std::vector<int64_t> wasted_;
  std::vector<int64_t> wasted_chunks_;
};

}  // namespace moex::tiers

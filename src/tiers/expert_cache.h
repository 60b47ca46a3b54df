// The deterministic state of one budgeted expert cache: which chunks (neuron ranges) of
// which experts own which pages, pins, and eviction. It does no I/O and reads no clock;
// every change is a function of the calls made, so the trace-replay simulator reproduces
// the engine's hits, misses and evictions exactly. The I/O side follows its Commands.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
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
    kFetch,    // Read chunk of expert into page (new generation).
    kRelease,  // Page left the cache: drop its queued transfers (in-flight ones drain).
    kPromote,  // The expert is now demanded: its queued transfers become demand.
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

  // Makes every chunk of `range` present, evicting unpinned experts (not `key`) by score.
  // All-or-nothing: returns false and changes nothing when there is not enough room.
  // New chunks are emitted as kFetch commands with the given class and priority.
  bool Insert(const ExpertKey& key, NeuronRange range, bool demand, double priority,
              const Scorer& scorer, std::vector<CacheCommand>* out);
  // Drops the expert (all its pages). Pinned experts cannot be removed.
  void Remove(const ExpertKey& key, std::vector<CacheCommand>* out);

  void Pin(const ExpertKey& key);
  void Unpin(const ExpertKey& key);

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
  // Prefetched experts evicted before any use, per layer.
  const std::vector<int64_t>& wasted_per_layer() const { return wasted_; }

 private:
  struct Entry {
    std::vector<int32_t> pages;  // Per chunk, -1 = absent.
    int present = 0;
    int pins = 0;
    bool unused_prefetch = false;
  };
  size_t Index(const ExpertKey& k) const {
    return static_cast<size_t>(k.layer) * static_cast<size_t>(g_.num_experts) +
           static_cast<size_t>(k.expert);
  }
  ExpertKey KeyOf(size_t index) const {
    return {static_cast<int32_t>(index / static_cast<size_t>(g_.num_experts)),
            static_cast<int32_t>(index % static_cast<size_t>(g_.num_experts))};
  }
  void FreeAll(size_t index, std::vector<CacheCommand>* out);

  CacheGeometry g_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> generation_;  // Per page.
  // Lowest free page first, so page choice is deterministic.
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> free_;
  std::vector<size_t> holders_;  // Indices of entries with at least one page (sorted lazily).
  int64_t peak_used_ = 0;
  std::vector<int64_t> evictions_;
  std::vector<int64_t> wasted_;
};

}  // namespace moex::tiers

// How a budget becomes a cache: chunk size, page size and page count from the experts'
// geometry. The engine (from its expert store) and the simulator (from a trace) both plan
// through these functions, so the same budget gives the same cache in both.
#pragma once

#include <cstdint>

#include "io/weight_source.h"
#include "model/model_config.h"
#include "policy/policy_facts.h"
#include "tiers/expert_cache.h"

namespace moex::tiers {

struct ExpertGeometry {
  int num_layers = 0;      // Decoder layers (the key space).
  int num_moe_layers = 0;  // Layers whose experts are cached.
  int num_experts = 0;
  int neurons = 0;           // F.
  int64_t record_bytes = 0;  // Bytes of one neuron record.
  int block_neurons = 0;     // The store's checksum/alignment block.
};

// Largest power-of-two multiple of the store block whose records fit in 1 MiB: big enough
// for efficient reads, small enough that a demand read waits at most one chunk.
int AutoChunkNeurons(const ExpertGeometry& g);
// Bytes of pages needed to hold every expert (what a budget of 100% means).
int64_t FullFootprint(const ExpertGeometry& g, int chunk_neurons);
// chunk_neurons 0 = AutoChunkNeurons. The capacity never exceeds the full footprint.
CacheGeometry PlanCache(const ExpertGeometry& g, int chunk_neurons, int64_t budget_bytes);

// The static facts a policy is built with, as plain values. `weights` (may be null) holds
// the router tensors, converted to f32 when a policy asks for a layer's; it must outlive
// the facts. The caller sets `future` and `worker`.
policy::PolicyFacts MakePolicyFacts(const ModelConfig& config, const CacheGeometry& cache,
                                    int64_t expert_bytes, const WeightSource* weights,
                                    uint64_t seed);

}  // namespace moex::tiers

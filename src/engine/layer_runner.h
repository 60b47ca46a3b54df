// Drives one MoE layer's routed experts through the host tier: after the gate, chunks that
// are already resident are computed first, then the rest in the order they land; each
// landed chunk is computed at once as a partial expert. Chunks of one expert are computed
// strictly in neuron order (the kernels' chunking contract), so any landing order gives
// the same bits. Nothing is computed from a page before its read has landed and verified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "policy/events.h"
#include "tiers/host_tier.h"

namespace moex {

struct ChunkTask {
  int32_t expert = 0;
  int neuron_begin = 0;
  int neuron_count = 0;
  const std::byte* records = nullptr;  // neuron_count neuron-major records.
};

// Computes the tasks (at most one per expert, so their outputs are distinct).
using ChunkComputeFn = std::function<void(std::span<const ChunkTask>)>;

// Computes what the tier planned at `layer`'s gate event (HostTier::TakePlan), emitting
// expert_done to the tier for each expert once its last chunk is computed. On a failed read
// it unpins the layer's experts, forgets the failed one, and throws Error naming the layer,
// expert and cause; the tier stays usable for the next request.
void RunOffloadedLayer(tiers::HostTier& tier, int layer, const ChunkComputeFn& compute);

}  // namespace moex

// Where a MoE layer's routing may come from instead of the model's router. The transformer
// consults it after the router has run, so a model with the same topology as a recorded
// trace follows the trace's choices (`--replay-routing`, sim/routing_replay.h): a measured
// offload run on real expert sizes and the real disk then sees learned routing instead of
// the near-uniform routing of random weights. The model's outputs are meaningless then.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/router.h"

namespace moex {

class RoutingSource {
 public:
  virtual ~RoutingSource() = default;
  // Replaces the chosen experts and their combine weights (and the full probabilities when
  // it has them) of MoE `layer` for this pass's tokens. decode[t] != 0 when token t is a
  // decode step (its request's only token in the pass). May set routing->gate_input: the
  // gate input policies then see in place of the layer's.
  virtual void Override(int layer, std::span<const char> decode, Routing* routing) = 0;
  // May replace the pass's pooled input embeddings (one row per request, `token_counts`
  // tokens each) that iteration_begin carries, with rows of width *d. Returns false to
  // keep the model's own.
  virtual bool OverridePooled(std::span<const int64_t> token_counts, std::vector<float>* pooled,
                              int64_t* d) {
    return false;
  }
};

}  // namespace moex

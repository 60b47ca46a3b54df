// What one MoE layer of an expert-parallel pass puts on the network, in layout A of
// docs/expert-parallel.md: rank 0 (attention, routers) sends each token's input row once to
// every other rank that owns one of its routed experts (the scatter), and receives one output
// row per (token, remote expert) (the gather). Each round costs its latency plus its bytes
// over rank 0's link; a round with no rows costs nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dist/expert_placement.h"

namespace moex::sim {

struct LayerExchange {
  int64_t input_rows = 0;   // (token, remote rank) pairs: the rows rank 0 sends.
  int64_t output_rows = 0;  // (token, remote expert) pairs: the rows rank 0 receives.
  int64_t bytes_sent = 0, bytes_received = 0;
  std::vector<int64_t> bytes_to, bytes_from;  // Per rank (rank 0's entries stay 0).
  double scatter_ms = 0, gather_ms = 0;
  double ms() const { return scatter_ms + gather_ms; }
};

// `ids`: the layer's routing, [n_tokens, top_k] (an expert repeated in a token's row counts
// once). `row_bytes`: one f32 hidden row (hidden_size x 4).
LayerExchange ExchangeOf(std::span<const int32_t> ids, int64_t n_tokens, int top_k, int layer,
                         const dist::ExpertPlacement& placement, int64_t row_bytes, double gb_per_s,
                         double latency_us);

}  // namespace moex::sim

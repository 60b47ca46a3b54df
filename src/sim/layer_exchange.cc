#include "sim/layer_exchange.h"

#include <algorithm>

#include "core/error.h"

namespace moex::sim {

LayerExchange ExchangeOf(std::span<const int32_t> ids, int64_t n_tokens, int top_k, int layer,
                         const dist::ExpertPlacement& placement, int64_t row_bytes, double gb_per_s,
                         double latency_us) {
  Check(n_tokens >= 0 && top_k >= 1 && ids.size() == static_cast<size_t>(n_tokens * top_k),
        "layer ", layer, ": ", ids.size(), " routed ids for ", n_tokens, " tokens of top-", top_k);
  Check(gb_per_s > 0, "the network link's bandwidth must be positive");
  const size_t ranks = static_cast<size_t>(placement.ranks());
  LayerExchange x;
  x.bytes_to.assign(ranks, 0);
  x.bytes_from.assign(ranks, 0);
  std::vector<int32_t> experts;
  std::vector<char> reached(ranks);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto row = ids.subspan(static_cast<size_t>(t * top_k), static_cast<size_t>(top_k));
    experts.assign(row.begin(), row.end());
    std::sort(experts.begin(), experts.end());
    experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
    std::fill(reached.begin(), reached.end(), 0);
    for (int32_t e : experts) {
      const size_t r = static_cast<size_t>(placement.rank_of(layer, e));
      if (r == 0) continue;
      ++x.output_rows;
      x.bytes_from[r] += row_bytes;
      if (!reached[r]) {
        reached[r] = 1;
        ++x.input_rows;
        x.bytes_to[r] += row_bytes;
      }
    }
  }
  x.bytes_sent = x.input_rows * row_bytes;
  x.bytes_received = x.output_rows * row_bytes;
  auto round_ms = [&](int64_t bytes) {
    return bytes > 0 ? latency_us / 1e3 + static_cast<double>(bytes) / (gb_per_s * 1e6) : 0.0;
  };
  x.scatter_ms = round_ms(x.bytes_sent);
  x.gather_ms = round_ms(x.bytes_received);
  return x;
}

}  // namespace moex::sim

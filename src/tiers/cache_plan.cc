#include "tiers/cache_plan.h"

#include <algorithm>

#include "core/error.h"
#include "io/expert_store_format.h"

namespace moex::tiers {

int AutoChunkNeurons(const ExpertGeometry& g) {
  int chunk = g.block_neurons;
  while (chunk * 2 <= g.neurons && static_cast<int64_t>(chunk) * 2 * g.record_bytes <= (1 << 20))
    chunk *= 2;
  return chunk;
}

namespace {
int64_t PageBytes(const ExpertGeometry& g, int chunk) {
  return static_cast<int64_t>(AlignUp(
      static_cast<uint64_t>(chunk) * static_cast<uint64_t>(g.record_bytes), kStoreAlignment));
}
}  // namespace

int64_t FullFootprint(const ExpertGeometry& g, int chunk) {
  chunk = std::min(chunk, g.neurons);
  const int64_t chunks = (g.neurons + chunk - 1) / chunk;
  return PageBytes(g, chunk) * chunks * g.num_experts * g.num_moe_layers;
}

CacheGeometry PlanCache(const ExpertGeometry& g, int chunk_neurons, int64_t budget_bytes) {
  const int chunk = chunk_neurons > 0 ? chunk_neurons : AutoChunkNeurons(g);
  Check(chunk % g.block_neurons == 0 || chunk >= g.neurons, "chunk of ", chunk,
        " neurons is not a multiple of the store's block (", g.block_neurons, ")");
  Check(budget_bytes >= 0, "negative cache budget");
  CacheGeometry c;
  c.num_layers = g.num_layers;
  c.num_experts = g.num_experts;
  c.neurons = g.neurons;
  c.chunk_neurons = std::min(chunk, g.neurons);
  c.page_bytes = PageBytes(g, c.chunk_neurons);
  c.capacity_pages =
      std::min(budget_bytes / c.page_bytes, FullFootprint(g, c.chunk_neurons) / c.page_bytes);
  return c;
}

policy::PolicyContext MakePolicyContext(const ModelConfig& config, const CacheGeometry& cache,
                                        int64_t expert_bytes, const WeightSource* weights,
                                        uint64_t seed) {
  policy::PolicyContext ctx;
  ctx.config = config;
  ctx.expert_bytes = expert_bytes;
  ctx.capacity_experts = cache.capacity_pages / cache.chunks_per_expert();
  ctx.weights = weights;
  ctx.seed = seed;
  return ctx;
}

}  // namespace moex::tiers

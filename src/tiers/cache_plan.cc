#include "tiers/cache_plan.h"

#include <algorithm>

#include "core/error.h"
#include "io/expert_store_format.h"
#include "model/tensor_names.h"

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
  Check(c.page_bytes > 0 && g.record_bytes > 0 &&
            c.page_bytes / g.record_bytes >= static_cast<int64_t>(c.chunk_neurons),
        "cache plan: a chunk of ", c.chunk_neurons, " neurons of ", g.record_bytes,
        " bytes does not fit in 64 bits");
  c.capacity_pages =
      std::min(budget_bytes / c.page_bytes, FullFootprint(g, c.chunk_neurons) / c.page_bytes);
  return c;
}

policy::PolicyFacts MakePolicyFacts(const ModelConfig& config, const CacheGeometry& cache,
                                    int64_t expert_bytes, const WeightSource* weights,
                                    uint64_t seed) {
  policy::PolicyFacts f;
  f.model_name = ArchName(config.arch);
  f.num_layers = config.num_layers;
  for (int l = 0; l < config.num_layers; ++l) f.moe_layer.push_back(config.IsMoeLayer(l) ? 1 : 0);
  f.num_experts = config.num_experts;
  f.top_k = config.num_experts_per_tok;
  f.hidden_size = config.hidden_size;
  f.neurons = cache.neurons;
  f.chunk_neurons = cache.chunk_neurons;
  f.expert_bytes = expert_bytes;
  f.page_bytes = cache.page_bytes;
  f.capacity_pages = cache.capacity_pages;
  f.capacity_experts = cache.capacity_pages / cache.chunks_per_expert();
  f.seed = seed;
  if (weights != nullptr) {
    const std::string router = TensorNamesFor(config).router;
    const int experts = config.num_experts, d = config.hidden_size;
    f.router_weights = [weights, router, experts, d](int layer) {
      const TensorView& w = weights->Get(TensorNames::Layer(layer, router), {experts, d});
      return TensorToF32(w);
    };
    // A checkpoint's [E] bias or a trace's [1, E] copy of it; absent: none.
    const auto optional_bias = [weights, experts](std::string name) {
      return [weights, name, experts](int layer) {
        const TensorView* b = weights->Find(TensorNames::Layer(layer, name));
        if (b == nullptr) return std::vector<float>{};
        Check(b->numel() == experts, "router bias ", b->name, " has ", b->numel(), " values for ",
              experts, " experts");
        return TensorToF32(*b);
      };
    };
    if (config.router == RouterKind::kGroupedTopK)
      f.router_bias = optional_bias(TensorNamesFor(config).router_bias);
    if (config.router_bias)
      f.router_logit_bias = optional_bias(TensorNamesFor(config).router_linear_bias);
  }
  if (config.router == RouterKind::kGroupedTopK) f.grouped_gate = GroupedGate::Of(config);
  return f;
}

}  // namespace moex::tiers

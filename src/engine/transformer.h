// The forward pass shared by every architecture, over a batch of sequences: each batch item
// appends its tokens to its own KV cache. Architecture differences are ModelConfig flags
// (q/k norm, biases, shared experts, dense layers); names were resolved at load time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/moe_executor.h"
#include "engine/rope.h"
#include "engine/router.h"
#include "model/model.h"

namespace moex {

struct BatchItem {
  KvCache* cache = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // Logits for every token, not only the last.
};

// Observes each layer's routing (trace recording, policies, statistics).
class RoutingObserver {
 public:
  virtual ~RoutingObserver() = default;
  virtual void OnRouting(int layer, const Routing& routing, const float* gate_input) = 0;
};

class Transformer {
 public:
  Transformer(const Model& model, MoeExecutor& executor);

  // Runs the batch and returns logits: for each item in order, all_logits ? one row per token
  // : one row (its last token); rows of vocab_size floats.
  std::vector<float> Forward(std::span<const BatchItem> items);

  void set_routing_observer(RoutingObserver* observer) { observer_ = observer; }
  const Model& model() const { return model_; }

 private:
  void Attention(int layer, std::span<const BatchItem> items, int64_t total);
  void FeedForward(int layer, int64_t total);
  void DenseSwiGlu(const DenseFfn& ffn, const float* x, int64_t n, float* out);

  const Model& model_;
  MoeExecutor& executor_;
  RopeTable rope_;
  RoutingObserver* observer_ = nullptr;

  // Scratch, grown to the largest batch seen.
  std::vector<float> hidden_, normed_, q_, k_, v_, attn_, proj_, ffn_out_, gate_, up_;
  std::vector<float> router_logits_, cos_, sin_;
  std::vector<int64_t> positions_;
  Routing routing_;
};

}  // namespace moex

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
#include "engine/routing_source.h"
#include "model/model.h"
#include "policy/event_sink.h"

namespace moex {

// MLA's attention softmax scale: 1 / sqrt(qk_nope + qk_rope), times YaRN's
// mscale(factor, mscale_all_dim)^2 when configured (HF DeepseekV2Attention).
float MlaSoftmaxScale(const ModelConfig& config);

struct BatchItem {
  KvCache* cache = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // Logits for every token, not only the last.
  int64_t request = -1;     // From BeginRequest; -1 for a pass outside any request.
  // LongRoPE only: the sequence length that selects the short or long frequencies for
  // this item's tokens is max(cache length after this pass, rope_length). The generator
  // sets it to the prompt length for every prefill chunk, so a chunked prefill rotates as
  // HF's single prefill pass does (0: the cache length after this pass).
  int64_t rope_length = 0;
};

class Transformer {
 public:
  Transformer(const Model& model, MoeExecutor& executor);

  // Runs the batch as one iteration of the event stream and returns logits: for each item in
  // order, all_logits ? one row per token : one row (its last token); rows of vocab_size
  // floats. iteration_end is emitted even when the pass fails.
  std::vector<float> Forward(std::span<const BatchItem> items);

  // request_begin / request_end: ids count from 0 over this transformer's lifetime.
  int64_t BeginRequest(std::span<const int32_t> prompt);
  void EndRequest(int64_t request);
  // The event stream goes to these sinks, each event once: observers (a trace recorder,
  // statistics) in the order they were added, then the executor's offload stack
  // (MoeExecutor::event_sink), so an observer that throws (a recorder on a full disk) stops
  // the event before the stack pins anything for it. REQUIRES: a sink outlives every event
  // after it was added (or is removed first).
  void AddSink(policy::EventSink* sink);
  void RemoveSink(policy::EventSink* sink) { events_.Remove(sink); }
  // Routing replay: MoE layers follow `source` instead of the router (null: the router).
  void set_routing_source(RoutingSource* source) { routing_source_ = source; }
  bool replays_routing() const { return routing_source_ != nullptr; }
  // True when a pass that ends with the sequence `seq_len` tokens long rotates with
  // LongRoPE's long set (never without LongRoPE).
  bool RotatesLong(int64_t seq_len) const { return rope_.UsesLong(seq_len); }
  const Model& model() const { return model_; }

 private:
  // Scratch buffers grow to the largest pass seen and are reused by the next.
  static void Grow(std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
  }
  std::vector<float> RunLayers(std::span<const BatchItem> items, int64_t total);
  void EmitIterationBegin(std::span<const BatchItem> items, int64_t total);
  void Attention(int layer, std::span<const BatchItem> items, int64_t total);
  // Multi-head Latent Attention (config.mla), in engine/mla_attention.cc.
  void MlaAttention(int layer, std::span<const BatchItem> items, int64_t total);
  // A Gated DeltaNet layer (config.delta_net), in engine/gated_delta_net.cc: each item's
  // tokens continue the recurrent state its cache keeps, prefill in chunks.
  void GatedDeltaNet(int layer, std::span<const BatchItem> items, int64_t total);
  void FeedForward(int layer, int64_t total);
  void DenseSwiGlu(const DenseFfn& ffn, const float* x, int64_t n, float* out);
  // The model's norm (RMSNorm, or LayerNorm with `bias`) over n rows of hidden_size.
  void Norm(const float* x, const std::vector<float>& weight, const std::vector<float>& bias,
            int64_t n, float* out) const;

  const Model& model_;
  MoeExecutor& executor_;
  RopeTable rope_;
  policy::EventFanOut events_;  // Observers, then stack_.
  policy::EventSink* stack_ = nullptr;
  RoutingSource* routing_source_ = nullptr;
  int64_t next_request_ = 0;
  int64_t next_iteration_ = 0;

  // Scratch, grown to the largest batch seen.
  std::vector<float> hidden_, normed_, q_, k_, v_, attn_, proj_, ffn_out_, gate_, up_;
  std::vector<float> router_logits_, cos_, sin_, pooled_;
  std::vector<float> latent_q_, latent_out_;  // MLA: queries and outputs in latent space.
  std::vector<float> q_gate_, out_gate_;      // Gated attention: q_proj's rows, the gates.
  // Gated DeltaNet: projections, convolved q/k/v, z, b/a, beta and decay, the heads' output.
  std::vector<float> gdn_proj_, gdn_qkv_, gdn_conv_, gdn_z_, gdn_ba_, gdn_beta_, gdn_g_, gdn_out_;
  std::vector<int64_t> iteration_requests_, iteration_token_counts_;
  std::vector<int32_t> iteration_tokens_;
  std::vector<int32_t> routed_;      // The gate event's routed set.
  std::vector<char> decode_tokens_;  // Per token of the pass: its request's only token.
  std::vector<int64_t> positions_;
  Routing routing_;
};

}  // namespace moex

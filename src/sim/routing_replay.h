// Routing replay (`--replay-routing TRACE`): the engine's MoE layers follow a recorded
// trace's expert choices instead of their own router, so an offload run of a random model
// with the trace's topology (e.g. OLMoE-1B-7B's shape under the demo model's routing)
// measures real expert sizes, real reads and real cache behaviour under learned routing.
// It is the measured counterpart of `moex sim --scale-to`. The model's outputs are
// meaningless and every JSON report says so.
//
// The trace's gates become, per MoE layer, two streams of token rows: prompt tokens and
// decode tokens (a request's only token in its pass). Each engine token takes the next row
// of its kind at every layer, so the layers of one token stay the trace's layers of one
// token; a stream that runs out starts over (counted as a wrap). Policies see the trace's
// gate inputs and router weights when the trace carries them (recorded with --hidden f32),
// so next-gate speculation predicts the routing the engine really follows, and its pooled
// embeddings (recorded with --pooled) for semantic matching.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/routing_source.h"
#include "model/model_config.h"
#include "policy/policy_facts.h"
#include "trace/trace_reader.h"

namespace moex::sim {

class TraceRouting : public RoutingSource {
 public:
  // Reads the trace's gates; throws Error when its topology (layers, MoE layers, experts,
  // top-k) differs from `config` or it has no gates.
  TraceRouting(const std::string& trace_path, const ModelConfig& config);

  void Override(int layer, std::span<const char> decode, Routing* routing) override;
  // The trace's pooled embeddings (recorded with --pooled), one per request and pass, taken
  // in order from a stream of prompt passes and one of decode passes as the gates are.
  bool OverridePooled(std::span<const int64_t> token_counts, std::vector<float>* pooled,
                      int64_t* d) override;

  // Gives the policies the trace's gate width and router weights (when it carries gate
  // inputs; else predicting policies have no router to run and say so).
  void AdjustFacts(policy::PolicyFacts& facts) const;
  bool carries_gate_inputs() const { return has_hidden_ && has_router_; }

  // {"trace", "outputs_meaningful": false, "replayed_tokens", "trace_tokens", "wraps"}.
  nlohmann::json ToJson() const;

 private:
  struct Stream {
    std::vector<int32_t> ids;    // [rows, top_k]
    std::vector<float> weights;  // [rows, top_k]
    std::vector<float> probs;    // [rows, num_experts] when the trace has them.
    std::vector<float> hidden;   // [rows, hidden] when the trace has them.
    int64_t rows = 0;
    int64_t next = 0;
  };
  enum Kind { kPrompt = 0, kDecode = 1 };

  std::unique_ptr<trace::TraceReader> reader_;  // Owns the router weights the facts read.
  ModelConfig trace_config_;
  int top_k_ = 0, num_experts_ = 0;
  int first_moe_ = -1;  // Tokens and wraps are counted there.
  int64_t hidden_d_ = 0;
  bool has_hidden_ = false, has_probs_ = false, has_router_ = false;
  std::vector<std::array<Stream, 2>> streams_;  // [layer][kind]; dense layers stay empty.
  bool has_pooled_ = false;
  std::array<Stream, 2> pooled_;  // [kind]: `hidden` holds the rows (one per request and pass).
  std::array<int64_t, 2> replayed_{}, wraps_{};
  std::vector<float> gate_input_;  // The pass's gate inputs for the policies.
};

}  // namespace moex::sim

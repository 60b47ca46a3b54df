// Counts which experts the router picks, per MoE layer, as the engine runs: attached to the
// Transformer as one of its event sinks, it sees every gate of every request. The web page's
// layer x expert heatmap is drawn from these counts (GET /moex/cache).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "policy/event_sink.h"

namespace moex::serve {

class ExpertActivity : public policy::EventSink {
 public:
  ExpertActivity(int num_layers, int num_experts);

  // Every (token, top-k slot) counts one activation of its expert; every distinct expert of
  // a gate counts one access of its layer (what an offloading cache sees as a hit or miss).
  void OnGate(const policy::GateEvent& e) override;
  // A pass's distinct experts, summed over its MoE layers, go to the callback at its end,
  // with whether every request of the pass was decoding (one token each).
  void OnIterationBegin(const policy::IterationBeginEvent& e) override {
    pass_experts_ = 0;
    decode_only_ = e.n_tokens == e.n_requests;
  }
  void OnIterationEnd() override {
    if (on_pass_) on_pass_(pass_experts_, decode_only_);
  }
  using PassCallback = std::function<void(int64_t experts, bool decode_only)>;
  void set_pass_callback(PassCallback on_pass) { on_pass_ = std::move(on_pass); }

  int num_layers() const { return num_layers_; }
  int num_experts() const { return num_experts_; }
  int64_t activations(int layer, int expert) const;
  int64_t accesses(int layer) const { return accesses_[static_cast<std::size_t>(layer)]; }
  int64_t gates() const { return gates_; }

 private:
  int num_layers_, num_experts_;
  std::vector<int64_t> activations_;  // [layer * num_experts + expert]
  std::vector<int64_t> accesses_;     // [layer]
  int64_t gates_ = 0;
  int64_t pass_experts_ = 0;
  bool decode_only_ = false;
  PassCallback on_pass_;
};

}  // namespace moex::serve

// Where the forward pass is in the fixed cycle of MoE gates. Within a pass the MoE layers'
// gates come in layer order and passes follow one another, so the number of gates until a
// layer's next gate is known exactly: the part of an expert's next use that needs no
// prediction. An evictor that ignores it (a global LRU) evicts the experts of the layers
// that run next, which is why LRU never hits below about top-k x layers cached experts.
//
// The cycle is advanced by the events: BeginPass (iteration_begin), AfterGate (gate) and
// EndPass (iteration_end). Between a gate's demand and its OnGate the cache inserts that
// gate's misses; ServingGate (called from KeepOnMiss, once per demanded miss) says so, and
// then an unpinned expert of that layer is known not to be routed by it.
#pragma once

#include <cstddef>
#include <vector>

namespace moex::policy {

class GateCycle {
 public:
  // `moe_layer[l]` != 0 where decoder layer l has routed experts.
  explicit GateCycle(const std::vector<char>& moe_layer);

  int size() const { return static_cast<int>(order_.size()); }  // MoE gates per pass.
  // Position of a MoE layer in the cycle (0 = the first MoE layer); -1 for a dense layer.
  int PositionOf(int layer) const { return position_[static_cast<size_t>(layer)]; }

  void BeginPass() { Restart(); }
  void EndPass() { Restart(); }
  void AfterGate(int layer);
  void ServingGate(int layer) { serving_ = PositionOf(layer); }
  bool Serving(int layer) const { return serving_ >= 0 && PositionOf(layer) == serving_; }

  // Gates from now until the next gate of `layer` that may route its experts, counting the
  // next gate (or the one being served) as 1: in [1, size()], or size() + 1 for the layer
  // whose gate is being served (its unpinned experts were not routed by it, and a miss it
  // routed is next used a whole cycle later).
  int GatesUntil(int layer) const;

 private:
  void Restart() {
    upcoming_ = 0;
    serving_ = -1;
  }
  std::vector<int> order_;     // MoE layers in cycle order.
  std::vector<int> position_;  // Per decoder layer: its position, or -1.
  int upcoming_ = 0;           // Position of the next gate.
  int serving_ = -1;           // Position of the gate whose demand is being served, or -1.
};

}  // namespace moex::policy

// PLEC, ExpertFlow's predictive locality-aware expert caching (§3.2), and the order in which
// its real-time correction picks victims. One pool of `capacity` expert slots serves every
// layer (no per-layer quota): it is filled in layer order with the pass's predicted experts,
// and when a layer's computation finishes its slots go to the next layers' predictions.
// The paper's example: 4 layers × 4 experts all predicted active, a pool of 8: layers 1 and
// 2 are fetched first; once layer 1 is done, layer 3 takes its slots.
//
// Victims (the correction's order, §3.2): first the mis-prefetched experts (predicted for a
// layer whose gate has come, not routed), then the idle ones (computation finished, or not
// predicted for what remains of the pass), least recently used first; last the planned ones
// (predicted for a layer still to come), the farthest layer first. The experts the current
// layer computes are pinned by the cache, never victims. Layers are MoE layer indices here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "policy/events.h"

namespace moex::policy {

class PlecPlan {
 public:
  enum Tier : int { kMisprefetched = 0, kIdle = 1, kPlanned = 2 };

  PlecPlan() = default;
  PlecPlan(int layers, int experts);

  int layers() const { return layers_; }
  bool active() const { return active_; }

  // A pass begins with its predicted experts per layer, strongest first.
  void BeginPass(std::vector<std::vector<int32_t>> predicted);
  // The experts the pool should hold now, nearest layer first, at most `capacity`: the
  // predictions of the layers from the first one not yet computed, in layer order (the
  // last layer to fit may be cut). Already-resident ones are in it too: they keep a slot.
  struct Slot {
    int layer = 0;
    int32_t expert = 0;
  };
  std::vector<Slot> Window(int64_t capacity) const;
  // The gate of `layer` came with its routed experts: returns the mis-prefetched ones
  // (predicted, not routed), which become the first victims.
  std::vector<int32_t> Gate(int layer, const std::vector<int32_t>& routed);
  // Every routed expert of `layer` has been computed: its slots are free for later layers.
  void LayerDone(int layer);
  void EndPass();

  Tier TierOf(int layer, int32_t expert) const;
  // Eviction score (lower goes first) of an expert last used at `last_use`.
  double Score(int layer, int32_t expert, uint64_t last_use) const;

  int first_pending() const { return first_pending_; }  // First layer not computed.
  bool Predicted(int layer, int32_t expert) const;

 private:
  size_t Key(int layer, int32_t expert) const { return KeyIndex({layer, expert}, experts_); }
  int layers_ = 0, experts_ = 0;
  bool active_ = false;
  std::vector<std::vector<int32_t>> predicted_;  // [layer] strongest first.
  std::vector<int32_t> rank_;                    // [key] rank in its layer's prediction or -1.
  std::vector<char> misprefetched_;              // [key]
  int first_pending_ = 0;
};

}  // namespace moex::policy

// fMoE's Expert Map Store (§4.1, §4.4) and its two searches (§4.2).
//
// An entry is one request's iteration: its semantic embedding (the pooled input embedding,
// `dim` floats) and its expert map, the gate's probability distribution over the J experts
// of every one of the L MoE layers (L·J floats, layer after layer). The store keeps at most
// `capacity` entries: appended while there is room; when full, a new entry replaces the one
// with the highest redundancy score
//     RDY = (d/L)·cos(sem, sem_y) + ((L − d)/L)·cos(map, map_y)
// (or, without deduplication, the oldest entry).
//
// Searches (cosine similarity, the highest wins, ties: the newest entry):
//  * semantic (Eq. 4): the embedding against every stored embedding;
//  * trajectory (Eq. 5): the layers observed so far against the same layers of every stored
//    map. TrajectoryMatch keeps each entry's dot product across the gates of one pass and
//    the store keeps each entry's squared norm through every layer and a layer-major copy of
//    the maps, so a gate costs one contiguous pass of J multiply-adds per entry, not the
//    whole prefix.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/policy_state.h"

namespace moex::policy {

class ExpertMapStore {
 public:
  // `distance` (d) weighs the redundancy score; `dedup` false replaces the oldest entry.
  ExpertMapStore(int layers, int experts, int capacity, int distance, bool dedup);

  int layers() const { return layers_; }
  int experts() const { return experts_; }
  int capacity() const { return capacity_; }
  int size() const { return static_cast<int>(stamp_.size()); }
  int dim() const { return dim_; }  // Embedding width; 0 until the first entry.
  // Changes whenever the stored entries change (trajectory matches restart).
  uint64_t version() const { return version_; }

  // Stores an iteration; returns its slot. `sem` must be as wide as every earlier entry's.
  int Insert(const std::vector<float>& sem, const std::vector<float>& map);
  // The redundancy score of (sem, map) against a stored entry.
  double Redundancy(const std::vector<float>& sem, const std::vector<float>& map, int slot) const;
  // The same with the new entry's squared norms given (computed once per insertion).
  double Redundancy(const std::vector<float>& sem, double sem_sq, const std::vector<float>& map,
                    double map_sq, int slot) const;

  struct Match {
    int slot = -1;  // -1: the store is empty.
    double score = 0;
  };
  Match MatchSemantic(const std::vector<float>& sem) const;

  const float* Map(int slot) const { return &maps_[static_cast<size_t>(slot) * MapSize()]; }
  const float* Sem(int slot) const { return &sems_[static_cast<size_t>(slot) * dim_]; }
  uint64_t Stamp(int slot) const { return stamp_[static_cast<size_t>(slot)]; }
  // Layer `layer` of every stored map, [size()][J] contiguous (the trajectory search's
  // layout: one stream per gate instead of one row per map at the map's stride).
  const float* LayerRows(int layer) const {
    return layer_rows_.data() + static_cast<size_t>(layer) * row_capacity_ * experts_;
  }
  // Squared norm of a stored map's layers 0..layer.
  double NormSqThrough(int slot, int layer) const {
    return norm_sq_[static_cast<size_t>(slot) * layers_ + static_cast<size_t>(layer)];
  }

  void Save(StateWriter& out) const;
  // Replaces the contents with a saved store of the same shape that fits.
  void Load(StateReader& in);

  static double Dot(const float* a, const float* b, size_t n);
  // Cosine similarity; 0 when either vector is all zero (no direction).
  static double Cosine(const float* a, const float* b, size_t n);

 private:
  size_t MapSize() const { return static_cast<size_t>(layers_) * static_cast<size_t>(experts_); }
  void Write(int slot, const std::vector<float>& sem, const std::vector<float>& map,
             uint64_t stamp);
  void ReserveRows(int n);

  int layers_, experts_, capacity_, distance_;
  bool dedup_;
  int dim_ = 0;
  uint64_t version_ = 0;
  uint64_t next_stamp_ = 1;
  std::vector<float> sems_;        // [size][dim]
  std::vector<float> maps_;        // [size][L·J]
  std::vector<float> layer_rows_;  // [L][row_capacity_][J]: the same maps layer by layer.
  int row_capacity_ = 0;
  std::vector<double> norm_sq_;      // [size][L]: squared norm of layers 0..l.
  std::vector<double> sem_norm_sq_;  // [size]
  std::vector<uint64_t> stamp_;      // [size] insertion order (larger = newer).
};

// The trajectory search of one request through one pass: AddLayer for each gate in layer
// order, then Best. Starts over when the store changed (Reset).
class TrajectoryMatch {
 public:
  void Reset(const ExpertMapStore& store);
  // Adds the request's distribution at MoE layer `layer` (J floats); layers must come in
  // order 0, 1, ... since the last Reset.
  void AddLayer(const ExpertMapStore& store, int layer, const float* probs);
  // The stored map most similar over the layers added so far.
  ExpertMapStore::Match Best(const ExpertMapStore& store) const;
  bool stale(const ExpertMapStore& store) const { return version_ != store.version(); }
  int layers_added() const { return next_layer_; }

 private:
  uint64_t version_ = ~uint64_t{0};
  int next_layer_ = 0;
  double query_norm_sq_ = 0;
  std::vector<double> dots_;  // [store size]
};

}  // namespace moex::policy

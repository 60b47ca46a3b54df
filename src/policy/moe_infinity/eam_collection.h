// MoE-Infinity's EAM Collection (EAMC, §4.2) and its query (§5.1 step 1, §6).
//
// The EAMC keeps at most `capacity` request-level EAMs. A finished request's EAM is
// appended while there is room; when full it replaces the stored EAM *most similar* to it
// (smallest cosine distance), which keeps the newest trace and the collection diverse.
//
// The query matches the iteration EAM *so far* against every stored EAM. The collection is
// stored cell-major (one cell of every entry is contiguous) with per-entry running sums of
// squared row norms, so that:
//  * a gate adds one row to the query, and its nonzero cells (top_k x tokens at most) each
//    cost one vectorised multiply-add over the entries; earlier rows' dot products are kept
//    (EamcMatcher), so a query costs the new row only, not L·E per entry;
//  * the norm of an entry restricted to the rows observed so far is one load.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "policy/moe_infinity/expert_activation_matrix.h"
#include "policy/policy_state.h"

namespace moex::policy {

class EamCollection {
 public:
  EamCollection(int layers, int experts, int capacity);

  int layers() const { return layers_; }
  int experts() const { return experts_; }
  int capacity() const { return capacity_; }
  int size() const { return size_; }
  // Changes whenever the stored EAMs change (queries cached against it start over).
  uint64_t version() const { return version_; }

  // Stores a finished request's EAM (§4.2); returns its slot. An all-zero EAM is not
  // stored (-1): it is equally far from every entry and says nothing about any expert.
  // When full, the entry at the smallest cosine distance is replaced; ties replace the
  // oldest entry (the paper does not say).
  int Insert(const ExpertActivationMatrix& eam);
  // Cosine distance from `eam` to every stored entry, in slot order.
  std::vector<double> Distances(const ExpertActivationMatrix& eam) const;

  ExpertActivationMatrix Entry(int slot) const;
  float Cell(int slot, int layer, int expert) const {
    return entries_[static_cast<size_t>(slot) * Cells() + CellIndex(layer, expert)];
  }
  // Insertion order of a slot's entry (larger = newer).
  uint64_t Stamp(int slot) const { return stamp_[static_cast<size_t>(slot)]; }
  // One cell of every entry, [size()] contiguous floats.
  const float* CellAcrossEntries(int layer, int expert) const {
    return &cells_[CellIndex(layer, expert) * static_cast<size_t>(capacity_)];
  }
  // Squared norm of every entry's rows 0..layer, [size()] floats.
  const float* NormSqThroughRow(int layer) const {
    return &norm_sq_[static_cast<size_t>(layer) * static_cast<size_t>(capacity_)];
  }
  // Element-wise sum of the given entries' rows from `from_layer` on (earlier rows zero).
  ExpertActivationMatrix Sum(std::span<const int> slots, int from_layer) const;

  void Save(StateWriter& out) const;
  // Replaces the contents with a saved collection of the same shape that fits.
  void Load(StateReader& in);

 private:
  size_t Cells() const { return static_cast<size_t>(layers_) * static_cast<size_t>(experts_); }
  size_t CellIndex(int layer, int expert) const {
    return static_cast<size_t>(layer) * static_cast<size_t>(experts_) + static_cast<size_t>(expert);
  }
  void Write(int slot, const ExpertActivationMatrix& eam, uint64_t stamp);

  int layers_, experts_, capacity_;
  int size_ = 0;
  uint64_t version_ = 0;
  uint64_t next_stamp_ = 1;
  std::vector<float> cells_;    // [L·E][capacity]: the query's layout.
  std::vector<float> entries_;  // [capacity][L·E]: the same counts entry by entry (sums).
  std::vector<float> norm_sq_;  // [L][capacity]: sum over rows 0..i of the squared cells
  std::vector<uint64_t> stamp_;
};

// The §5.1 query, kept incrementally over the gates of one iteration.
class EamcMatcher {
 public:
  struct Match {
    int slot = 0;
    double distance = 1;  // Cosine distance over the compared rows.
  };

  // Forgets the query (a new iteration, or another collection).
  void Reset();
  // Adds row `layer` of the query (nonzero counts of the iteration EAM at that MoE layer).
  // Rows come in increasing order within a query; an earlier row starts a new query. When
  // the collection changed since the last row, the kept rows are matched again.
  void AddRow(const EamCollection& c, int layer, std::span<const float> row);
  // The `m` nearest entries with distance < 1 (some shared expert), nearest first; ties:
  // newest first. `observed_only`: compare rows 0..last added only, masking the entries'
  // later rows too (the query's later rows are zero because they are not known yet, not
  // because those experts idle); otherwise the full flattened vectors of §4.2.
  std::vector<Match> Nearest(const EamCollection& c, int m, bool observed_only) const;
  int last_layer() const { return last_layer_; }

 private:
  void Accumulate(const EamCollection& c, int32_t layer, int32_t expert, float value);

  uint64_t version_ = 0;
  const EamCollection* collection_ = nullptr;
  int last_layer_ = -1;
  double query_sq_ = 0;
  std::vector<float> dot_;  // [capacity] query · entry over the rows added.
  struct Cell {
    int32_t layer, expert;
    float value;
  };
  std::vector<Cell> query_;  // Nonzero cells added, to match again after a change.
};

}  // namespace moex::policy

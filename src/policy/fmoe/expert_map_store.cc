#include "policy/fmoe/expert_map_store.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moex::policy {

ExpertMapStore::ExpertMapStore(int layers, int experts, int capacity, int distance, bool dedup)
    : layers_(layers), experts_(experts), capacity_(capacity), distance_(distance), dedup_(dedup) {
  Check(layers > 0 && experts > 0 && capacity > 0 && distance >= 0, "expert map store of ", layers,
        " layers x ", experts, " experts, capacity ", capacity, ", distance ", distance);
}

double ExpertMapStore::Dot(const float* a, const float* b, size_t n) {
  // Eight independent sums: the searches are bound by this loop, and one running sum would
  // wait for every add before the next (no reassociation without -ffast-math).
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t k = 0; k < 8; ++k) acc[k] += static_cast<double>(a[i + k]) * b[i + k];
  for (; i < n; ++i) acc[0] += static_cast<double>(a[i]) * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

double ExpertMapStore::Cosine(const float* a, const float* b, size_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  if (aa <= 0 || bb <= 0) return 0;
  return ab / std::sqrt(aa * bb);
}

double ExpertMapStore::Redundancy(const std::vector<float>& sem, const std::vector<float>& map,
                                  int slot) const {
  return Redundancy(sem, Dot(sem.data(), sem.data(), sem.size()), map,
                    Dot(map.data(), map.data(), map.size()), slot);
}

double ExpertMapStore::Redundancy(const std::vector<float>& sem, double sem_sq,
                                  const std::vector<float>& map, double map_sq, int slot) const {
  Check(sem.size() == static_cast<size_t>(dim_) && map.size() == MapSize(),
        "expert map store: redundancy of a ", sem.size(), "-wide embedding and ", map.size(),
        " probabilities (want ", dim_, " and ", MapSize(), ")");
  // The stored norms leave one sum per cosine.
  auto cosine = [](double ab, double aa, double bb) {
    return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
  };
  const double w = std::min(1.0, static_cast<double>(distance_) / layers_);
  return w * cosine(Dot(sem.data(), Sem(slot), sem.size()), sem_sq,
                    sem_norm_sq_[static_cast<size_t>(slot)]) +
         (1 - w) * cosine(Dot(map.data(), Map(slot), MapSize()), map_sq,
                          NormSqThrough(slot, layers_ - 1));
}

int ExpertMapStore::Insert(const std::vector<float>& sem, const std::vector<float>& map) {
  Check(map.size() == MapSize(), "expert map store: a map of ", map.size(), " probabilities where ",
        layers_, " layers x ", experts_, " experts take ", MapSize());
  Check(!sem.empty(), "expert map store: an iteration without a semantic embedding");
  if (dim_ == 0) dim_ = static_cast<int>(sem.size());
  Check(sem.size() == static_cast<size_t>(dim_), "expert map store: a ", sem.size(),
        "-wide embedding where the stored ones are ", dim_, " wide");
  int slot = size();
  if (slot < capacity_) {
    sems_.resize(sems_.size() + static_cast<size_t>(dim_));
    maps_.resize(maps_.size() + MapSize());
    norm_sq_.resize(norm_sq_.size() + static_cast<size_t>(layers_));
    sem_norm_sq_.push_back(0);
    stamp_.push_back(0);
    ReserveRows(size());
  } else {
    // Full: replace the most redundant entry (ties: the oldest), or the oldest one.
    slot = 0;
    double best = -2;
    const double sem_sq = Dot(sem.data(), sem.data(), sem.size()),
                 map_sq = Dot(map.data(), map.data(), map.size());
    for (int y = 0; y < size(); ++y) {
      if (!dedup_) {
        if (Stamp(y) < Stamp(slot)) slot = y;
        continue;
      }
      const double r = Redundancy(sem, sem_sq, map, map_sq, y);
      if (r > best || (r == best && Stamp(y) < Stamp(slot))) {
        best = r;
        slot = y;
      }
    }
  }
  Write(slot, sem, map, next_stamp_++);
  return slot;
}

void ExpertMapStore::Write(int slot, const std::vector<float>& sem, const std::vector<float>& map,
                           uint64_t stamp) {
  std::copy(sem.begin(), sem.end(), sems_.begin() + static_cast<ptrdiff_t>(slot) * dim_);
  std::copy(map.begin(), map.end(),
            maps_.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(slot) * MapSize()));
  const size_t J = static_cast<size_t>(experts_);
  for (int l = 0; l < layers_; ++l)
    std::copy(map.begin() + static_cast<ptrdiff_t>(l * J),
              map.begin() + static_cast<ptrdiff_t>((l + 1) * J),
              layer_rows_.begin() +
                  static_cast<ptrdiff_t>((static_cast<size_t>(l) * row_capacity_ + slot) * J));
  double sum = 0;
  for (int l = 0; l < layers_; ++l) {
    for (int j = 0; j < experts_; ++j) {
      const double v = map[static_cast<size_t>(l) * experts_ + static_cast<size_t>(j)];
      sum += v * v;
    }
    norm_sq_[static_cast<size_t>(slot) * layers_ + static_cast<size_t>(l)] = sum;
  }
  double sem_sq = 0;
  for (float v : sem) sem_sq += static_cast<double>(v) * v;
  sem_norm_sq_[static_cast<size_t>(slot)] = sem_sq;
  stamp_[static_cast<size_t>(slot)] = stamp;
  ++version_;
}

void ExpertMapStore::ReserveRows(int n) {
  if (n <= row_capacity_) return;
  // Grows geometrically up to the capacity, so appends copy O(1) rows on average and a
  // large capacity costs nothing until it fills.
  const int cap = std::max(n, std::min(capacity_, std::max(64, 2 * row_capacity_)));
  const size_t J = static_cast<size_t>(experts_);
  std::vector<float> rows(static_cast<size_t>(layers_) * cap * J);
  for (int l = 0; l < layers_; ++l)
    std::copy_n(
        layer_rows_.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(l) * row_capacity_ * J),
        static_cast<size_t>(row_capacity_) * J,
        rows.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(l) * cap * J));
  layer_rows_ = std::move(rows);
  row_capacity_ = cap;
}

ExpertMapStore::Match ExpertMapStore::MatchSemantic(const std::vector<float>& sem) const {
  Match best;
  if (size() == 0) return best;
  Check(sem.size() == static_cast<size_t>(dim_), "expert map store: a ", sem.size(),
        "-wide embedding where the stored ones are ", dim_, " wide");
  double qq = 0;
  for (float v : sem) qq += static_cast<double>(v) * v;
  for (int y = 0; y < size(); ++y) {
    const float* stored = Sem(y);
    double dot = 0;
    for (int i = 0; i < dim_; ++i)
      dot += static_cast<double>(sem[static_cast<size_t>(i)]) * stored[i];
    const double norms = qq * sem_norm_sq_[static_cast<size_t>(y)];
    const double s = norms > 0 ? dot / std::sqrt(norms) : 0;
    if (best.slot < 0 || s > best.score || (s == best.score && Stamp(y) > Stamp(best.slot))) {
      best.slot = y;
      best.score = s;
    }
  }
  return best;
}

void ExpertMapStore::Save(StateWriter& out) const {
  out.U64(static_cast<uint64_t>(layers_));
  out.U64(static_cast<uint64_t>(experts_));
  out.U64(static_cast<uint64_t>(size()));
  out.U64(static_cast<uint64_t>(dim_));
  out.U64(next_stamp_);
  for (int y = 0; y < size(); ++y) {
    out.U64(Stamp(y));
    out.Floats(std::vector<float>(Sem(y), Sem(y) + dim_));
    out.Floats(std::vector<float>(Map(y), Map(y) + MapSize()));
  }
}

void ExpertMapStore::Load(StateReader& in) {
  const uint64_t layers = in.U64(), experts = in.U64(), size = in.U64(), dim = in.U64();
  Check(layers == static_cast<uint64_t>(layers_) && experts == static_cast<uint64_t>(experts_),
        in.origin(), ": expert maps of ", layers, " layers x ", experts,
        " experts where the model has ", layers_, " x ", experts_);
  Check(size <= static_cast<uint64_t>(capacity_), in.origin(), ": the expert map store holds ",
        size, " maps, more than the capacity of ", capacity_);
  Check(dim < (uint64_t{1} << 24) && (size == 0 || dim > 0), in.origin(),
        ": expert map store with ", dim, "-wide embeddings");
  const uint64_t next_stamp = in.U64();
  sems_.clear();
  maps_.clear();
  layer_rows_.clear();
  row_capacity_ = 0;
  norm_sq_.clear();
  sem_norm_sq_.clear();
  stamp_.clear();
  dim_ = static_cast<int>(dim);
  for (uint64_t y = 0; y < size; ++y) {
    const uint64_t stamp = in.U64();
    Check(stamp < next_stamp, in.origin(), ": expert map ", y, " is newer than the store");
    const std::vector<float> sem = in.Floats(), map = in.Floats();
    Check(sem.size() == dim && map.size() == MapSize(), in.origin(), ": expert map ", y, " has ",
          sem.size(), " embedding values and ", map.size(), " probabilities (want ", dim, " and ",
          MapSize(), ")");
    sems_.resize(sems_.size() + dim);
    maps_.resize(maps_.size() + MapSize());
    norm_sq_.resize(norm_sq_.size() + static_cast<size_t>(layers_));
    sem_norm_sq_.push_back(0);
    stamp_.push_back(0);
    ReserveRows(static_cast<int>(stamp_.size()));
    Write(static_cast<int>(y), sem, map, stamp);
  }
  next_stamp_ = next_stamp;
  ++version_;
}

void TrajectoryMatch::Reset(const ExpertMapStore& store) {
  version_ = store.version();
  next_layer_ = 0;
  query_norm_sq_ = 0;
  dots_.assign(static_cast<size_t>(store.size()), 0.0);
}

void TrajectoryMatch::AddLayer(const ExpertMapStore& store, int layer, const float* probs) {
  Check(layer == next_layer_ && !stale(store) && layer < store.layers(), "trajectory match: layer ",
        layer, " after ", next_layer_, " layers");
  const int experts = store.experts();
  const size_t J = static_cast<size_t>(experts);
  query_norm_sq_ += ExpertMapStore::Dot(probs, probs, J);
  const float* rows = store.LayerRows(layer);  // Every map's row of this layer, contiguous.
  for (int y = 0; y < store.size(); ++y)
    dots_[static_cast<size_t>(y)] +=
        ExpertMapStore::Dot(probs, rows + static_cast<size_t>(y) * J, J);
  ++next_layer_;
}

ExpertMapStore::Match TrajectoryMatch::Best(const ExpertMapStore& store) const {
  ExpertMapStore::Match best;
  if (next_layer_ == 0 || stale(store)) return best;
  for (int y = 0; y < store.size(); ++y) {
    const double norms = query_norm_sq_ * store.NormSqThrough(y, next_layer_ - 1);
    const double s = norms > 0 ? dots_[static_cast<size_t>(y)] / std::sqrt(norms) : 0;
    if (best.slot < 0 || s > best.score ||
        (s == best.score && store.Stamp(y) > store.Stamp(best.slot))) {
      best.slot = y;
      best.score = s;
    }
  }
  return best;
}

}  // namespace moex::policy

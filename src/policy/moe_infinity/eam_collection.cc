#include "policy/moe_infinity/eam_collection.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moex::policy {
namespace {

// dot[k] += v * col[k]: the query's inner loop, one cell against every stored EAM. Cloned
// for AVX-512 and AVX2 (chosen at load time) and vectorised whatever the build's -O level.
__attribute__((target_clones("avx512f", "avx2", "default"),
               optimize("vect-cost-model=dynamic"))) void
AddScaled(float* __restrict dot, const float* __restrict col, float v, int n) {
  for (int k = 0; k < n; ++k) dot[k] += v * col[k];
}

}  // namespace

EamCollection::EamCollection(int layers, int experts, int capacity)
    : layers_(layers), experts_(experts), capacity_(capacity) {
  Check(layers > 0 && experts > 0, "EAM collection of ", layers, " x ", experts, " EAMs");
  Check(capacity > 0, "EAM collection capacity ", capacity, " (must be at least 1)");
  const size_t c = static_cast<size_t>(capacity);
  cells_.assign(Cells() * c, 0.0f);
  entries_.assign(Cells() * c, 0.0f);
  norm_sq_.assign(static_cast<size_t>(layers) * c, 0.0f);
  stamp_.assign(c, 0);
}

std::vector<double> EamCollection::Distances(const ExpertActivationMatrix& eam) const {
  Check(eam.layers() == layers_ && eam.experts() == experts_, "matching a ", eam.layers(), " x ",
        eam.experts(), " EAM against a collection of ", layers_, " x ", experts_, " EAMs");
  std::vector<float> dot(static_cast<size_t>(size_), 0.0f);
  double eam_sq = 0;
  for (int i = 0; i < layers_; ++i)
    for (int j = 0; j < experts_; ++j) {
      const float v = eam.at(i, j);
      if (v == 0) continue;
      eam_sq += static_cast<double>(v) * v;
      AddScaled(dot.data(), CellAcrossEntries(i, j), v, size_);
    }
  std::vector<double> d(static_cast<size_t>(size_), 1.0);
  const float* norms = NormSqThroughRow(layers_ - 1);
  for (int k = 0; k < size_; ++k) {
    const double n = static_cast<double>(norms[k]) * eam_sq;
    if (n > 0) d[static_cast<size_t>(k)] = 1.0 - dot[static_cast<size_t>(k)] / std::sqrt(n);
  }
  return d;
}

int EamCollection::Insert(const ExpertActivationMatrix& eam) {
  Check(eam.layers() == layers_ && eam.experts() == experts_, "inserting a ", eam.layers(), " x ",
        eam.experts(), " EAM into a collection of ", layers_, " x ", experts_, " EAMs");
  if (eam.IsZero()) return -1;
  int slot = size_;
  if (size_ < capacity_) {
    ++size_;
  } else {
    const std::vector<double> d = Distances(eam);
    slot = 0;
    for (int k = 1; k < size_; ++k) {
      const double a = d[static_cast<size_t>(k)], b = d[static_cast<size_t>(slot)];
      if (a < b || (a == b && stamp_[static_cast<size_t>(k)] < stamp_[static_cast<size_t>(slot)]))
        slot = k;
    }
  }
  Write(slot, eam, next_stamp_++);
  ++version_;
  return slot;
}

void EamCollection::Write(int slot, const ExpertActivationMatrix& eam, uint64_t stamp) {
  const size_t c = static_cast<size_t>(capacity_), s = static_cast<size_t>(slot);
  float norm = 0;
  for (int i = 0; i < layers_; ++i) {
    for (int j = 0; j < experts_; ++j) {
      const float v = eam.at(i, j);
      cells_[CellIndex(i, j) * c + s] = v;
      entries_[s * Cells() + CellIndex(i, j)] = v;
      norm += v * v;
    }
    norm_sq_[static_cast<size_t>(i) * c + s] = norm;
  }
  stamp_[s] = stamp;
}

ExpertActivationMatrix EamCollection::Entry(int slot) const {
  Check(slot >= 0 && slot < size_, "EAM collection has no entry ", slot, " (it holds ", size_, ")");
  ExpertActivationMatrix m(layers_, experts_);
  for (int i = 0; i < layers_; ++i)
    for (int j = 0; j < experts_; ++j) m.Add(i, j, Cell(slot, i, j));
  return m;
}

ExpertActivationMatrix EamCollection::Sum(std::span<const int> slots, int from_layer) const {
  ExpertActivationMatrix m(layers_, experts_);
  for (int slot : slots)
    Check(slot >= 0 && slot < size_, "EAM collection has no entry ", slot, " (it holds ", size_,
          ")");
  const size_t from = static_cast<size_t>(std::max(from_layer, 0)) * static_cast<size_t>(experts_);
  for (int slot : slots) {
    const float* entry = &entries_[static_cast<size_t>(slot) * Cells()];
    for (size_t cell = from; cell < Cells(); ++cell)
      if (entry[cell] != 0)
        m.Add(static_cast<int>(cell / static_cast<size_t>(experts_)),
              static_cast<int>(cell % static_cast<size_t>(experts_)), entry[cell]);
  }
  return m;
}

// Per entry: its stamp and its nonzero cells (request EAMs are sparse).
void EamCollection::Save(StateWriter& out) const {
  out.U64(static_cast<uint64_t>(layers_));
  out.U64(static_cast<uint64_t>(experts_));
  out.U64(static_cast<uint64_t>(size_));
  out.U64(next_stamp_);
  for (int k = 0; k < size_; ++k) {
    out.U64(stamp_[static_cast<size_t>(k)]);
    std::vector<float> index, value;  // Cell indices are < 2^24, exact as floats.
    for (int i = 0; i < layers_; ++i)
      for (int j = 0; j < experts_; ++j)
        if (const float v = Cell(k, i, j); v != 0) {
          index.push_back(static_cast<float>(CellIndex(i, j)));
          value.push_back(v);
        }
    out.Floats(index);
    out.Floats(value);
  }
}

void EamCollection::Load(StateReader& in) {
  const uint64_t layers = in.U64(), experts = in.U64(), size = in.U64();
  Check(layers == static_cast<uint64_t>(layers_) && experts == static_cast<uint64_t>(experts_),
        in.origin(), ": EAM collection of ", layers, " x ", experts, " EAMs where the model has ",
        layers_, " x ", experts_);
  Check(size <= static_cast<uint64_t>(capacity_), in.origin(), ": EAM collection holds ", size,
        " EAMs, more than the capacity of ", capacity_);
  const uint64_t next_stamp = in.U64();
  const size_t cells = Cells();
  std::fill(cells_.begin(), cells_.end(), 0.0f);
  std::fill(entries_.begin(), entries_.end(), 0.0f);
  std::fill(norm_sq_.begin(), norm_sq_.end(), 0.0f);
  std::fill(stamp_.begin(), stamp_.end(), 0);
  size_ = static_cast<int>(size);
  for (int k = 0; k < size_; ++k) {
    const uint64_t stamp = in.U64();
    Check(stamp < next_stamp, in.origin(), ": EAM collection entry ", k,
          " is newer than the collection");
    const std::vector<float> index = in.Floats(), value = in.Floats();
    Check(index.size() == value.size(), in.origin(), ": EAM collection entry ", k, " has ",
          index.size(), " cells and ", value.size(), " counts");
    ExpertActivationMatrix m(layers_, experts_);
    for (size_t n = 0; n < index.size(); ++n) {
      const float at = index[n];
      Check(at >= 0 && at < static_cast<float>(cells) && at == std::floor(at), in.origin(),
            ": EAM collection entry ", k, " has a cell outside the matrix");
      const int cell = static_cast<int>(at);
      m.Add(cell / experts_, cell % experts_, value[n]);
    }
    Write(k, m, stamp);
  }
  next_stamp_ = next_stamp;
  ++version_;
}

void EamcMatcher::Reset() {
  collection_ = nullptr;
  last_layer_ = -1;
  query_sq_ = 0;
  dot_.clear();
  query_.clear();
}

void EamcMatcher::Accumulate(const EamCollection& c, int32_t layer, int32_t expert, float value) {
  AddScaled(dot_.data(), c.CellAcrossEntries(layer, expert), value, c.size());
}

void EamcMatcher::AddRow(const EamCollection& c, int layer, std::span<const float> row) {
  Check(layer >= 0 && layer < c.layers() && row.size() == static_cast<size_t>(c.experts()),
        "EAMC query row ", layer, " of ", row.size(), " experts for a collection of ", c.layers(),
        " x ", c.experts(), " EAMs");
  if (layer <= last_layer_) Reset();
  if (collection_ != &c || version_ != c.version()) {
    collection_ = &c;
    version_ = c.version();
    dot_.assign(static_cast<size_t>(c.size()), 0.0f);
    for (const Cell& q : query_) Accumulate(c, q.layer, q.expert, q.value);
  }
  for (int j = 0; j < c.experts(); ++j) {
    const float v = row[static_cast<size_t>(j)];
    if (v == 0) continue;
    query_.push_back({layer, j, v});
    query_sq_ += static_cast<double>(v) * v;
    Accumulate(c, layer, j, v);
  }
  last_layer_ = layer;
}

std::vector<EamcMatcher::Match> EamcMatcher::Nearest(const EamCollection& c, int m,
                                                     bool observed_only) const {
  std::vector<Match> found;
  if (last_layer_ < 0 || query_sq_ == 0 || m <= 0) return found;
  Check(collection_ == &c && version_ == c.version(),
        "EAMC query: the collection changed after the query's last row");
  const float* norms = c.NormSqThroughRow(observed_only ? last_layer_ : c.layers() - 1);
  for (int k = 0; k < c.size(); ++k) {
    const float dot = dot_[static_cast<size_t>(k)];
    if (dot <= 0 || norms[k] <= 0) continue;
    found.push_back({k, 1.0 - dot / std::sqrt(query_sq_ * static_cast<double>(norms[k]))});
  }
  const auto nearer = [&](const Match& a, const Match& b) {
    return a.distance < b.distance ||
           (a.distance == b.distance && c.Stamp(a.slot) > c.Stamp(b.slot));
  };
  if (found.size() > static_cast<size_t>(m)) {
    std::nth_element(found.begin(), found.begin() + m, found.end(), nearer);
    found.resize(static_cast<size_t>(m));
  }
  std::sort(found.begin(), found.end(), nearer);
  return found;
}

}  // namespace moex::policy

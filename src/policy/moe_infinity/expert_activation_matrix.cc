#include "policy/moe_infinity/expert_activation_matrix.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moex::policy {

ExpertActivationMatrix::ExpertActivationMatrix(int layers, int experts)
    : layers_(layers), experts_(experts) {
  Check(layers >= 0 && experts >= 0, "expert activation matrix of ", layers, " x ", experts);
  cells_.assign(static_cast<size_t>(layers) * static_cast<size_t>(experts), 0.0f);
}

ExpertActivationMatrix ExpertActivationMatrix::FromRows(
    const std::vector<std::vector<float>>& rows) {
  const int experts = rows.empty() ? 0 : static_cast<int>(rows.front().size());
  ExpertActivationMatrix m(static_cast<int>(rows.size()), experts);
  for (size_t i = 0; i < rows.size(); ++i) {
    Check(rows[i].size() == static_cast<size_t>(experts), "expert activation matrix row ", i,
          " has ", rows[i].size(), " experts where row 0 has ", experts);
    for (int j = 0; j < experts; ++j)
      m.Add(static_cast<int>(i), j, rows[i][static_cast<size_t>(j)]);
  }
  return m;
}

void ExpertActivationMatrix::Add(const ExpertActivationMatrix& other) {
  Check(other.layers_ == layers_ && other.experts_ == experts_, "adding a ", other.layers_, " x ",
        other.experts_, " expert activation matrix to a ", layers_, " x ", experts_, " one");
  for (size_t i = 0; i < cells_.size(); ++i) cells_[i] += other.cells_[i];
}

void ExpertActivationMatrix::Clear() {
  std::fill(cells_.begin(), cells_.end(), 0.0f);
}

bool ExpertActivationMatrix::IsZero() const {
  for (float c : cells_)
    if (c != 0) return false;
  return true;
}

float ExpertActivationMatrix::RowSum(int layer) const {
  float s = 0;
  for (float c : row(layer)) s += c;
  return s;
}

double CosineDistance(std::span<const float> a, std::span<const float> b) {
  Check(a.size() == b.size(), "cosine distance between vectors of ", a.size(), " and ", b.size(),
        " elements");
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  if (aa == 0 || bb == 0) return 1.0;
  return 1.0 - dot / (std::sqrt(aa) * std::sqrt(bb));
}

double CosineDistance(const ExpertActivationMatrix& a, const ExpertActivationMatrix& b) {
  Check(a.layers() == b.layers() && a.experts() == b.experts(), "cosine distance between a ",
        a.layers(), " x ", a.experts(), " and a ", b.layers(), " x ", b.experts(),
        " expert activation matrix");
  return CosineDistance(a.cells(), b.cells());
}

}  // namespace moex::policy

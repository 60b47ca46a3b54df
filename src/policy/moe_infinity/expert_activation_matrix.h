// MoE-Infinity's Expert Activation Matrix (EAM, §4.1): for a model with L MoE layers of E
// experts, M[i][j] counts the token-expert assignments routed to expert j of MoE layer i.
// An iteration-level EAM covers one forward pass; a request-level EAM accumulates a
// request's iteration EAMs (prefill and decode traced separately). Rows are MoE layers in
// order (dense layers have none), so i is the MoE ordinal, not the decoder layer index.
//
// With top-k routing a row sums to k·n rather than the paper's n (which holds for top-1);
// cosine matching does not depend on the scale.
#pragma once

#include <span>
#include <vector>

namespace moex::policy {

class ExpertActivationMatrix {
 public:
  ExpertActivationMatrix() = default;
  ExpertActivationMatrix(int layers, int experts);
  // From rows of counts (tests, the paper's worked examples); rows must be equally long.
  static ExpertActivationMatrix FromRows(const std::vector<std::vector<float>>& rows);

  int layers() const { return layers_; }
  int experts() const { return experts_; }
  float at(int layer, int expert) const { return cells_[Index(layer, expert)]; }
  void Add(int layer, int expert, float count = 1) { cells_[Index(layer, expert)] += count; }
  // Element-wise sum; the shapes must agree.
  void Add(const ExpertActivationMatrix& other);
  void Clear();
  bool IsZero() const;
  float RowSum(int layer) const;
  // Row-major flattening (the L·E vector of §4.2).
  std::span<const float> cells() const { return cells_; }
  std::span<const float> row(int layer) const {
    return std::span<const float>(cells_).subspan(Index(layer, 0), static_cast<size_t>(experts_));
  }

 private:
  size_t Index(int layer, int expert) const {
    return static_cast<size_t>(layer) * static_cast<size_t>(experts_) + static_cast<size_t>(expert);
  }
  int layers_ = 0;
  int experts_ = 0;
  std::vector<float> cells_;
};

// §4.2: cosine distance 1 - a·b / (|a| |b|) between flattened EAMs. The paper does not say
// what an all-zero EAM is like: it has no direction, so it is like nothing (distance 1).
// Vectors of different lengths are an error.
double CosineDistance(std::span<const float> a, std::span<const float> b);
double CosineDistance(const ExpertActivationMatrix& a, const ExpertActivationMatrix& b);

}  // namespace moex::policy

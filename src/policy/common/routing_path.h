// A routing path: which experts of which layers a token (or a batch) activates, as an
// L × E bit matrix (ExpertFlow §3.1). A batch's path is the OR of its tokens' paths (the
// notes explain why the paper's "AND" is an erratum): an expert is fetched if any token
// needs it. Shared by ExpertFlow's predictor, its cache (PLEC) and the server's token
// regrouping, which minimises the activated experts of each pass (§3.3, Eq. 5).
#pragma once

#include <cstdint>
#include <vector>

namespace moex::policy {

class RoutingPath {
 public:
  RoutingPath() = default;
  RoutingPath(int layers, int experts);

  int layers() const { return layers_; }
  int experts() const { return experts_; }

  void Set(int layer, int expert);
  bool Test(int layer, int expert) const;
  // Activated experts over all layers (Eq. 5's term for one batch).
  int64_t Count() const;
  int64_t CountLayer(int layer) const;
  // Bits set in both / in either (the batch-level OR of §3.1).
  int64_t CountAnd(const RoutingPath& other) const;
  void OrWith(const RoutingPath& other);
  // Bits that differ: the Hamming distance of §3.3.3.
  int64_t Hamming(const RoutingPath& other) const;

  bool operator==(const RoutingPath&) const = default;

 private:
  void CheckSameShape(const RoutingPath& other) const;
  int layers_ = 0, experts_ = 0;
  int words_per_layer_ = 0;
  std::vector<uint64_t> words_;  // Layer after layer, words_per_layer_ words each.
};

}  // namespace moex::policy

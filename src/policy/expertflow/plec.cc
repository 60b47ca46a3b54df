#include "policy/expertflow/plec.h"

#include <algorithm>

#include "core/error.h"

namespace moex::policy {

PlecPlan::PlecPlan(int layers, int experts) : layers_(layers), experts_(experts) {
  Check(layers >= 0 && experts >= 0, "PLEC plan of negative shape");
  rank_.assign(static_cast<size_t>(layers) * static_cast<size_t>(experts), -1);
  misprefetched_.assign(rank_.size(), 0);
  predicted_.resize(static_cast<size_t>(layers));
}

void PlecPlan::BeginPass(std::vector<std::vector<int32_t>> predicted) {
  Check(predicted.size() == static_cast<size_t>(layers_), "PLEC: a prediction of ",
        predicted.size(), " layers for ", layers_);
  EndPass();
  predicted_ = std::move(predicted);
  for (int l = 0; l < layers_; ++l) {
    int32_t r = 0;
    for (int32_t e : predicted_[static_cast<size_t>(l)]) {
      Check(e >= 0 && e < experts_, "PLEC: predicted expert ", e, " of ", experts_);
      int32_t& slot = rank_[Key(l, e)];
      if (slot < 0) slot = r++;
    }
  }
  active_ = true;
}

std::vector<PlecPlan::Slot> PlecPlan::Window(int64_t capacity) const {
  std::vector<Slot> window;
  if (!active_) return window;
  for (int l = first_pending_; l < layers_; ++l) {
    for (int32_t e : predicted_[static_cast<size_t>(l)]) {
      if (static_cast<int64_t>(window.size()) >= capacity) return window;
      if (rank_[Key(l, e)] >= 0 && !misprefetched_[Key(l, e)]) window.push_back({l, e});
    }
  }
  return window;
}

std::vector<int32_t> PlecPlan::Gate(int layer, const std::vector<int32_t>& routed) {
  std::vector<int32_t> missed_by_prediction;
  if (!active_ || layer < 0 || layer >= layers_) return missed_by_prediction;
  for (int32_t e : predicted_[static_cast<size_t>(layer)]) {
    if (std::find(routed.begin(), routed.end(), e) != routed.end()) continue;
    if (!misprefetched_[Key(layer, e)]) missed_by_prediction.push_back(e);
    misprefetched_[Key(layer, e)] = 1;
  }
  return missed_by_prediction;
}

void PlecPlan::LayerDone(int layer) {
  if (layer + 1 > first_pending_) first_pending_ = std::min(layer + 1, layers_);
}

void PlecPlan::EndPass() {
  for (int l = 0; l < layers_; ++l) {
    for (int32_t e : predicted_[static_cast<size_t>(l)]) {
      rank_[Key(l, e)] = -1;
      misprefetched_[Key(l, e)] = 0;
    }
    predicted_[static_cast<size_t>(l)].clear();
  }
  first_pending_ = 0;
  active_ = false;
}

bool PlecPlan::Predicted(int layer, int32_t expert) const {
  return layer >= 0 && layer < layers_ && expert >= 0 && expert < experts_ &&
         rank_[Key(layer, expert)] >= 0;
}

PlecPlan::Tier PlecPlan::TierOf(int layer, int32_t expert) const {
  if (!Predicted(layer, expert)) return kIdle;
  if (misprefetched_[Key(layer, expert)]) return kMisprefetched;
  return layer >= first_pending_ ? kPlanned : kIdle;
}

double PlecPlan::Score(int layer, int32_t expert, uint64_t last_use) const {
  // Tiers are 2^40 apart; within the low tiers the use clock orders (LRU), within the
  // planned one nearer layers and stronger predictions score higher.
  constexpr double kTier = 1099511627776.0;  // 2^40
  const Tier t = TierOf(layer, expert);
  if (t != kPlanned) return static_cast<int>(t) * kTier + static_cast<double>(last_use);
  const double distance = layer - first_pending_;
  return static_cast<int>(kPlanned) * kTier +
         static_cast<double>(layers_ - distance) * (experts_ + 1) +
         (experts_ - rank_[Key(layer, expert)]);
}

}  // namespace moex::policy

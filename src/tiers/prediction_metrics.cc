#include "tiers/prediction_metrics.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace moex::tiers {

PredictionMetrics::PredictionMetrics(const std::vector<char>& moe_layer, int num_experts)
    : num_experts_(num_experts) {
  const size_t layers = moe_layer.size();
  moe_index_.assign(layers, -1);
  for (size_t l = 0; l < layers; ++l)
    if (moe_layer[l]) moe_index_[l] = num_moe_++;
  pending_.assign(layers, std::vector<int>(static_cast<size_t>(num_experts), 0));
  buckets_.assign(layers, std::vector<Bucket>(static_cast<size_t>(std::max(num_moe_, 1))));
  routed_.assign(layers, 0);
}

int PredictionMetrics::Distance(int target) const {
  if (position_ < 0) return target + 1;
  return target > position_ ? target - position_ : target + num_moe_ - position_;
}

void PredictionMetrics::Predict(const policy::ExpertKey& k) {
  if (k.layer < 0 || static_cast<size_t>(k.layer) >= moe_index_.size()) return;
  const int target = moe_index_[static_cast<size_t>(k.layer)];
  if (target < 0 || k.expert < 0 || k.expert >= num_experts_) return;
  int& d = pending_[static_cast<size_t>(k.layer)][static_cast<size_t>(k.expert)];
  d = std::max(d, Distance(target));
}

void PredictionMetrics::Resolve(int layer, std::span<const int32_t> routed,
                                const std::function<bool(int32_t)>& in_time) {
  std::vector<int>& pending = pending_[static_cast<size_t>(layer)];
  std::vector<Bucket>& buckets = buckets_[static_cast<size_t>(layer)];
  routed_[static_cast<size_t>(layer)] += static_cast<int64_t>(routed.size());
  std::vector<char> is_routed(pending.size(), 0);
  for (int32_t id : routed) is_routed[static_cast<size_t>(id)] = 1;
  for (size_t x = 0; x < pending.size(); ++x) {
    if (pending[x] == 0) continue;
    Bucket& b = buckets[static_cast<size_t>(pending[x] - 1)];
    ++b.predicted;
    if (is_routed[x]) {
      ++b.correct;
      if (in_time(static_cast<int32_t>(x))) ++b.in_time;
    }
    pending[x] = 0;
  }
}

bool PredictionMetrics::any() const {
  for (const auto& layer : buckets_)
    for (const Bucket& b : layer)
      if (b.predicted > 0) return true;
  return false;
}

namespace {

nlohmann::json Rates(const std::vector<PredictionMetrics::Bucket>& by_distance, int64_t routed) {
  nlohmann::json list = nlohmann::json::array();
  int64_t correct_at_or_beyond = 0;
  std::vector<int64_t> suffix(by_distance.size() + 1, 0);
  for (size_t d = by_distance.size(); d-- > 0;)
    suffix[d] = suffix[d + 1] + by_distance[d].correct;
  for (size_t d = 0; d < by_distance.size(); ++d) {
    const PredictionMetrics::Bucket& b = by_distance[d];
    correct_at_or_beyond = suffix[d];
    if (b.predicted == 0 && correct_at_or_beyond == 0) continue;
    auto ratio = [](int64_t a, int64_t n) { return n ? static_cast<double>(a) / n : 0.0; };
    list.push_back({{"distance", d + 1},
                    {"predicted", b.predicted},
                    {"correct", b.correct},
                    {"in_time", b.in_time},
                    {"precision", ratio(b.correct, b.predicted)},
                    {"recall_at_or_beyond", ratio(correct_at_or_beyond, routed)},
                    {"goodpred", ratio(b.in_time, b.predicted)}});
  }
  return list;
}

}  // namespace

nlohmann::json PredictionMetrics::ToJson() const {
  std::vector<Bucket> total(static_cast<size_t>(std::max(num_moe_, 1)));
  int64_t routed_total = 0;
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < buckets_.size(); ++l) {
    if (moe_index_[l] < 0) continue;
    for (size_t d = 0; d < total.size(); ++d) {
      total[d].predicted += buckets_[l][d].predicted;
      total[d].correct += buckets_[l][d].correct;
      total[d].in_time += buckets_[l][d].in_time;
    }
    routed_total += routed_[l];
    layers.push_back({{"layer", l}, {"routed", routed_[l]}, {"by_distance", Rates(buckets_[l], routed_[l])}});
  }
  return {{"routed", routed_total}, {"by_distance", Rates(total, routed_total)}, {"layers", layers}};
}

}  // namespace moex::tiers

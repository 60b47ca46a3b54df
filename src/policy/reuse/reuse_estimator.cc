#include "policy/reuse/reuse_estimator.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moex::policy {
namespace {

// Age buckets: 0, 1, 2, 3, 4-5, 6-7, 8-11, 12-15, 16-23, 24-31, 32-47, 48-63, 64+, never.
constexpr int kAgeEdges[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
constexpr int kAgeBuckets = 14;
constexpr int kRateBuckets = 8;
constexpr int kRecentBuckets = 5;
constexpr int kNextGateValues = 3;  // No prediction, predicted, not predicted.
constexpr int kCells = kAgeBuckets * kRateBuckets * kRecentBuckets * kNextGateValues;
// Coarser tables, finest first: (age, rate, nextgate), (age, nextgate), (nextgate).
constexpr int kLevelCells[] = {kCells, kAgeBuckets* kRateBuckets* kNextGateValues,
                               kAgeBuckets* kNextGateValues, kNextGateValues};
constexpr int kLevels = 4;
constexpr uint64_t kStateVersion = 1;

int AgeBucket(int64_t age) {  // age < 0: never routed.
  if (age < 0) return kAgeBuckets - 1;
  const int* end = std::end(kAgeEdges);
  return static_cast<int>(std::upper_bound(std::begin(kAgeEdges), end, age) -
                          std::begin(kAgeEdges)) -
         1;
}

// log2(rate / uniform) in [-4, 4) as 0..7 (rate 0: 0).
int RateBucket(double ratio) {
  if (ratio <= 0) return 0;
  return std::clamp(static_cast<int>(std::floor(std::log2(ratio))) + 4, 0, kRateBuckets - 1);
}

int RecentBucket(double ratio) {
  if (ratio < 0.25) return 0;
  if (ratio < 1) return 1;
  if (ratio < 2) return 2;
  if (ratio < 4) return 3;
  return 4;
}

int Project(int cell, int level) {
  const int ng = cell % kNextGateValues;
  const int rest = cell / kNextGateValues;
  const int age_rate = rest / kRecentBuckets;  // age * kRateBuckets + rate
  switch (level) {
    case 0:
      return cell;
    case 1:
      return age_rate * kNextGateValues + ng;
    case 2:
      return (age_rate / kRateBuckets) * kNextGateValues + ng;
    default:
      return ng;
  }
}

}  // namespace

ReuseEstimator::ReuseEstimator(int num_layers, int num_experts, int top_k, const Options& o)
    : layers_(num_layers), experts_(num_experts), o_(o) {
  Check(num_layers > 0 && num_experts > 0 && top_k > 0, "reuse estimator: invalid MoE shape");
  Check(o.horizon >= 2 && o.horizon <= 4096, "reuse estimator: horizon ", o.horizon,
        " outside [2, 4096]");
  Check(o.long_half_life > 0 && o.short_half_life > 0 && o.min_samples >= 1 && o.memory >= 1,
        "reuse estimator: invalid options");
  uniform_ = std::min(1.0, static_cast<double>(top_k) / num_experts);
  long_decay_ = std::exp2(-1.0 / o.long_half_life);
  short_decay_ = std::exp2(-1.0 / o.short_half_life);
  const size_t keys = static_cast<size_t>(num_layers) * static_cast<size_t>(num_experts);
  long_rate_.assign(keys, static_cast<float>(uniform_));
  pending_.resize(keys * static_cast<size_t>(o.horizon));
  tables_.resize(kLevels);
  for (int l = 0; l < kLevels; ++l) tables_[static_cast<size_t>(l)].resize(kLevelCells[l]);
  ResetRun();
}

void ReuseEstimator::ResetRun() {
  const size_t keys = long_rate_.size();
  gates_seen_.assign(static_cast<size_t>(layers_), 0);
  last_.assign(keys, -1);
  short_rate_.assign(keys, 0);
  predicted_.assign(keys, 0);
  pending_n_.assign(keys, 0);
}

int ReuseEstimator::CellOf(size_t i, When when) const {
  const int layer = static_cast<int>(i / static_cast<size_t>(experts_));
  const int64_t seen = gates_seen_[static_cast<size_t>(layer)];
  int64_t age = last_[i] < 0 ? -1 : seen - last_[i];
  double lr = long_rate_[i], sr = short_rate_[i];
  int ng = predicted_[i];
  if (when == When::kAfterMiss) {
    if (age >= 0) ++age;
    lr *= long_decay_;
    sr *= short_decay_;
    ng = 0;
  } else if (when == When::kAfterRoute) {
    age = 0;
    lr = lr * long_decay_ + (1 - long_decay_);
    sr = sr * short_decay_ + (1 - short_decay_);
    ng = 0;
  }
  const ReuseFeatures& f = o_.features;
  const int a = f.age ? AgeBucket(age) : 0;
  const int r = f.rate ? RateBucket(lr / uniform_) : 0;
  const int s = f.recent ? RecentBucket(sr / uniform_) : 0;
  const int n = f.nextgate ? ng : 0;
  return ((a * kRateBuckets + r) * kRecentBuckets + s) * kNextGateValues + n;
}

double ReuseEstimator::Lookup(int cell, double fallback) const {
  for (int l = 0; l < kLevels; ++l) {
    const Cell& c = tables_[static_cast<size_t>(l)][static_cast<size_t>(Project(cell, l))];
    if (c.count >= o_.min_samples) return c.sum / c.count;
  }
  return fallback;
}

double ReuseEstimator::ExpectedGates(const ExpertKey& k, When when) const {
  const size_t i = Index(k);
  double rate = long_rate_[i];
  if (when == When::kAfterRoute) rate = rate * long_decay_ + (1 - long_decay_);
  // No table yet: a geometric guess from the model-level rate.
  const double fallback = std::clamp(1.0 / std::max(rate, 1e-9), 1.0, double(o_.horizon));
  return Lookup(CellOf(i, when), fallback);
}

void ReuseEstimator::Learn(int cell, double label, double predicted) {
  for (int l = 0; l < kLevels; ++l) {
    Cell& c = tables_[static_cast<size_t>(l)][static_cast<size_t>(Project(cell, l))];
    c.sum += label;
    c.count += 1;
    if (c.count > o_.memory) {  // Older samples weigh less, so the table follows drift.
      c.sum *= 0.5;
      c.count *= 0.5;
    }
  }
  ++samples_;
  abs_error_ += std::abs(predicted - label);
  abs_error_n_ += 1;
}

void ReuseEstimator::ObserveGate(int layer, const int32_t* ids, int64_t n) {
  Check(layer >= 0 && layer < layers_, "reuse estimator: gate of layer ", layer, " of ", layers_);
  std::vector<char> routed(static_cast<size_t>(experts_), 0);
  for (int64_t j = 0; j < n; ++j) {
    Check(ids[j] >= 0 && ids[j] < experts_, "reuse estimator: expert ", ids[j], " of ", experts_);
    routed[static_cast<size_t>(ids[j])] = 1;
  }
  const int64_t h = o_.horizon;
  const int64_t t = gates_seen_[static_cast<size_t>(layer)] + 1;  // This gate's number.
  for (int x = 0; x < experts_; ++x) {
    const size_t i = Index({layer, x});
    const int cell = CellOf(i, When::kNow);
    Pending* ring = &pending_[i * static_cast<size_t>(h)];
    ring[t % h] = {static_cast<uint16_t>(cell), static_cast<float>(ExpectedGates({layer, x}))};
    int32_t& waiting = pending_n_[i];
    ++waiting;
    if (routed[static_cast<size_t>(x)]) {
      // The sample of gate s is labelled t - s + 1: gates until routed, this one included.
      for (int64_t s = t - waiting + 1; s <= t; ++s)
        Learn(ring[s % h].cell, static_cast<double>(t - s + 1), ring[s % h].predicted);
      waiting = 0;
    } else if (waiting == h) {  // The oldest sample's label reached the horizon.
      const Pending& p = ring[(t - h + 1) % h];
      Learn(p.cell, static_cast<double>(h), p.predicted);
      --waiting;
    }
  }
  gates_seen_[static_cast<size_t>(layer)] = t;
  // Rates count gates, not tokens: a prefill pass counts once. (Counting its tokens, each
  // routing the expert with the pass's share, was tried: 1 % slower at 25 % on the demo
  // model's GSM8K routing, docs/policies/reuse.md.)
  for (int x = 0; x < experts_; ++x) {
    const size_t i = Index({layer, x});
    const double share = routed[static_cast<size_t>(x)] ? 1.0 : 0.0;
    long_rate_[i] = static_cast<float>(long_rate_[i] * long_decay_ + (1 - long_decay_) * share);
    short_rate_[i] = static_cast<float>(short_rate_[i] * short_decay_ + (1 - short_decay_) * share);
    if (share > 0) last_[i] = t;
    predicted_[i] = 0;
  }
}

void ReuseEstimator::SetPredicted(int layer, const std::vector<int32_t>& experts) {
  for (int x = 0; x < experts_; ++x) predicted_[Index({layer, x})] = 2;
  for (int32_t x : experts)
    if (x >= 0 && x < experts_) predicted_[Index({layer, x})] = 1;
}

void ReuseEstimator::Save(StateWriter& out) const {
  out.U64(kStateVersion);
  out.U64(static_cast<uint64_t>(o_.horizon));
  for (const std::vector<Cell>& t : tables_) {
    out.U64(t.size());
    for (const Cell& c : t) {
      out.F64(c.sum);
      out.F64(c.count);
    }
  }
  out.Floats(long_rate_);
}

void ReuseEstimator::Load(StateReader& in) {
  const uint64_t version = in.U64();
  Check(version == kStateVersion, in.origin(), ": reuse estimator state version ", version,
        " (this build reads ", kStateVersion, ")");
  const uint64_t horizon = in.U64();
  Check(horizon == static_cast<uint64_t>(o_.horizon), in.origin(),
        ": reuse estimator learned with horizon ", horizon, ", this policy has ", o_.horizon);
  std::vector<std::vector<Cell>> tables(kLevels);
  for (int l = 0; l < kLevels; ++l) {
    const uint64_t n = in.U64();
    Check(n == static_cast<uint64_t>(kLevelCells[l]), in.origin(), ": reuse table ", l, " has ", n,
          " cells, expected ", kLevelCells[l]);
    tables[static_cast<size_t>(l)].resize(n);
    for (Cell& c : tables[static_cast<size_t>(l)]) {
      c.sum = in.F64();
      c.count = in.F64();
      Check(std::isfinite(c.sum) && std::isfinite(c.count) && c.count >= 0 && c.sum >= 0,
            in.origin(), ": reuse table ", l, " holds an invalid cell");
    }
  }
  std::vector<float> rates = in.Floats();
  Check(rates.size() == long_rate_.size(), in.origin(), ": reuse state has ", rates.size(),
        " expert rates, the model has ", long_rate_.size());
  for (float r : rates)
    Check(std::isfinite(r) && r >= 0 && r <= 1, in.origin(), ": reuse state rate ", r,
          " outside [0, 1]");
  tables_ = std::move(tables);
  long_rate_ = std::move(rates);
}

nlohmann::json ReuseEstimator::Report() const {
  int filled = 0;
  for (const Cell& c : tables_[0]) filled += c.count >= o_.min_samples;
  return {{"samples", samples_},
          {"cells_filled", filled},
          {"cells", kCells},
          {"mean_abs_error_gates", mean_abs_error()}};
}

}  // namespace moex::policy

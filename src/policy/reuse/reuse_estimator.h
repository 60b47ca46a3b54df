// The next-use estimator of the `reuse` evictor (docs/policies/reuse.md): for every expert,
// how many of its layer's gates will pass until it is routed again, learned as a table.
//
// Each gate of a layer leaves one sample per expert of that layer: the expert's features
// just before the gate, labelled later with the number of the layer's gates until the
// expert was routed (1 = routed at this gate), clamped at the horizon H. The label is the
// quantity Belady's MIN ranks by, read off the trace's (or the run's) own future, so the
// table regresses MIN's key: each cell holds the mean label of its samples (the conditional
// mean, which minimises the squared error). Features, each one a table dimension:
//   age      gates of its layer since it was last routed (0: routed at the last one, the
//            persistence feature), in 14 buckets up to H and "never";
//   rate     model-level decayed routing rate (half-life `long_half_life` gates), in 8 log
//            buckets relative to the uniform rate top-k / experts;
//   recent   request-level decayed rate (half-life `short_half_life` gates), 5 buckets;
//   nextgate for the layer after a gate whose input is known: whether that layer's router
//            applied to it puts the expert in some token's top-k.
// A cell with fewer than `min_samples` samples falls back to coarser tables: (age, rate,
// nextgate), (age, nextgate), (nextgate), then 1 / rate. Learning from traces (`--learn-from`)
// and serving run the same updates, so the table keeps learning online; cells weigh
// recent samples more once they hold `memory` samples (both sums halve).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "policy/events.h"
#include "policy/policy_state.h"

namespace moex::policy {

struct ReuseFeatures {
  bool age = true, rate = true, recent = true, nextgate = true;
};

class ReuseEstimator {
 public:
  struct Options {
    int horizon = 64;  // H, in gates of the expert's layer.
    double long_half_life = 256;
    double short_half_life = 8;
    int min_samples = 16;
    double memory = 1e5;
    ReuseFeatures features;
  };
  // Which state of an expert's features to look up.
  enum class When {
    kNow,         // As they are (before its layer's next gate).
    kAfterMiss,   // After the gate being served, which did not route it.
    kAfterRoute,  // After the gate being served, which routed it.
  };

  ReuseEstimator(int num_layers, int num_experts, int top_k, const Options& options);

  // The gate of `layer` routed `ids` (n of them, duplicates allowed): resolves the samples
  // its experts' earlier gates left, takes this gate's samples, then updates the features.
  void ObserveGate(int layer, const int32_t* ids, int64_t n);
  // The next-gate prediction for `layer`'s coming gate: `experts` are in some token's top-k
  // of its router applied to the previous gate's input. Forgotten at that gate.
  void SetPredicted(int layer, const std::vector<int32_t>& experts);

  // Expected gates of its layer until the expert is routed, counting the layer's next gate
  // (after `when`) as 1: in [1, horizon].
  double ExpectedGates(const ExpertKey& k, When when = When::kNow) const;

  // Forgets what belongs to one run (ages, recent rates, pending samples, predictions) and
  // keeps the tables and the model-level rates: called when learning from traces ends.
  void ResetRun();

  void Save(StateWriter& out) const;
  void Load(StateReader& in);
  // samples, filled cells, mean absolute error of the predictions the samples resolved.
  nlohmann::json Report() const;
  int64_t samples() const { return samples_; }
  double mean_abs_error() const { return abs_error_n_ > 0 ? abs_error_ / abs_error_n_ : 0; }

 private:
  struct Cell {
    double sum = 0, count = 0;
  };
  struct Pending {
    uint16_t cell = 0;
    float predicted = 0;
  };
  size_t Index(const ExpertKey& k) const { return KeyIndex(k, experts_); }
  int CellOf(size_t index, When when) const;
  double Lookup(int cell, double fallback) const;
  void Learn(int cell, double label, double predicted);

  int layers_, experts_;
  Options o_;
  double uniform_;  // top_k / experts: every expert's rate under uniform routing.
  double long_decay_, short_decay_;
  std::vector<int64_t> gates_seen_;  // Per decoder layer.
  std::vector<int64_t> last_;        // Per expert: gates_seen_ of its layer when last routed.
  std::vector<float> long_rate_, short_rate_;
  std::vector<uint8_t> predicted_;         // Per expert: 0 no prediction, 1 predicted, 2 not.
  std::vector<Pending> pending_;           // Per expert: a ring of `horizon` samples.
  std::vector<int32_t> pending_n_;         // Per expert: samples waiting for their label.
  std::vector<std::vector<Cell>> tables_;  // Full cell, then the coarser levels.
  int64_t samples_ = 0;
  double abs_error_ = 0, abs_error_n_ = 0;
};

}  // namespace moex::policy

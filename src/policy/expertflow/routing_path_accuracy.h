// ExpertFlow's batch-level prediction accuracy (§5.2, Eq. 7). The formula is lost from the
// paper's text; what survives is that a batch's paths are OR-aggregated. Defined here per
// layer as the Jaccard index |P ∩ T| / |P ∪ T| of the batch's predicted and true expert
// sets (1 when both are empty): strict in both directions, as the paper's low TLP/SLP
// figures suggest. Per-bit precision |P ∩ T| / |P|, recall |P ∩ T| / |T| and the exact
// set-match rate are reported beside it (docs/policies/expertflow.md).
//
// Batches are formed as a server would: the tokens of one decode step of different requests,
// `batch` requests at a time in request order (a last, smaller group is kept).
#pragma once

#include <cstdint>
#include <vector>

#include "policy/common/routing_path.h"

namespace moex::policy {

struct PathSample {
  int64_t request = 0;
  int64_t step = 0;  // Decode step of the request.
  RoutingPath predicted, truth;
};

struct BatchAccuracy {
  int batch = 0;
  int64_t batches = 0;
  // Per layer, averaged over batches.
  std::vector<double> jaccard, precision, recall, exact;
  double mean_jaccard = 0, mean_precision = 0, mean_recall = 0, mean_exact = 0;
};

BatchAccuracy BatchLevelAccuracy(const std::vector<PathSample>& samples, int batch);

}  // namespace moex::policy

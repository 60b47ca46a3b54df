// fMoE's formulas (Yu et al., "fMoE: Fine-Grained Expert Offloading for Large Mixture-of-
// Experts Serving", §4.3 and §4.5), as free functions so each is tested by hand:
//  * the expert selection threshold δ_l = clip(1 − score, 0, 1) of a matched map's score;
//  * similarity-aware selection (Eq. 6–8): the smallest set of a layer's experts, highest
//    probability first, whose probabilities sum to at least δ_l, never fewer than top-K;
//  * the prefetch priority p / (l − l_now) and the eviction key p · freq (the inverse of
//    the paper's PRI^evict = 1 / (p · freq): the platform evicts the lowest score first).
#pragma once

#include <cstdint>
#include <vector>

namespace moex::policy::fmoe {

// δ_l = max(0, min(1 − score, 1)); a NaN score (no similarity) counts as 0.
double SelectionThreshold(double score);

// Eq. 6–8 over one layer's J probabilities: experts in descending probability (ties: lower
// id first), taken until at least `k` are chosen and their sum reaches `delta`; never more
// than J. Returns expert ids in the order taken.
std::vector<int32_t> SelectExperts(const float* probs, int num_experts, double delta, int k);

// PRI^prefetch = p / (l − l_now) with layers counted in MoE layers; `distance` = l − l_now
// must be at least 1 (a layer at or behind the current one is not prefetched).
double PrefetchPriority(double p, int distance);

// The platform's eviction score for PRI^evict = 1 / (p · freq): p · freq, lowest first.
// A never-used expert (freq 0) or one the map gives no probability scores 0 (PRI^evict ∞).
double EvictionScore(double p, int64_t freq);

}  // namespace moex::policy::fmoe

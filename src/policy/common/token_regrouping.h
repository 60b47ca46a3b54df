// Token regrouping (ExpertFlow §3.3): split the tokens (requests) ready to run into `groups`
// passes of equal size so that the passes together activate as few experts as possible.
//
// The objective is Eq. 5 (lost from the text, rebuilt in the notes): the sum over the groups
// of the experts each group's routing path activates, a group's path being the OR of its
// members' paths (the text's AND is an erratum). The exact problem is a balanced partition
// and too slow to solve between passes, so, as §3.3.3, a balanced 2-medoid clustering on
// Hamming distance (Eq. 6's similarity is any decreasing map of it; the distance itself is
// used): seeded random initial medoids (the first of several restarts takes the member
// farthest from its random first medoid as the second, k-medoids++ style), every member ranked by
// how much closer it is to one medoid than to the other and the first n0 of that ranking taken as
// group 0 (the "adjust when a cluster exceeds its size" step, which keeps the sizes exact), the
// medoids moved to the member closest in sum to the rest of its group, until they stop moving or an
// iteration limit. The restart with the least Eq. 5 wins.
//
// More than two groups: recursive bisection. The groups [lo, hi) are halved into [lo, mid)
// and [mid, hi), the members bisected in the sizes those two halves must hold, and each half
// split again; group sizes differ by at most one (the first n % groups groups get one more).
//
// The safeguard: the clustering's split replaces the input split only when it activates
// strictly fewer experts, so regrouping never increases Eq. 5 and never moves a request for
// nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "policy/common/routing_path.h"

namespace moex::policy {

// Eq. 5: the experts activated by each group (the OR of its members' paths), summed over
// the groups. group[i] is member i's group, in [0, groups).
int64_t ActivatedExperts(std::span<const RoutingPath> paths, std::span<const int> group,
                         int groups);

// Sizes of `groups` balanced groups of n members: n / groups each, one more for the first
// n % groups.
std::vector<int> BalancedSizes(int n, int groups);

// The split without regrouping: members in order, the first BalancedSizes()[0] to group 0,
// the next ones to group 1, ...
std::vector<int> ContiguousGroups(int n, int groups);

struct RegroupOptions {
  int groups = 2;
  uint64_t seed = 0;        // Initial medoids.
  int max_iterations = 16;  // Medoid updates per clustering.
  int restarts = 4;         // Clusterings from different random medoids; the best is kept.
};

// The balanced clustering alone (no safeguard): group of each path, sizes BalancedSizes.
// Deterministic given options.seed.
std::vector<int> BalancedGroups(std::span<const RoutingPath> paths, const RegroupOptions& options);

struct RegroupResult {
  std::vector<int> group;  // The chosen split.
  int64_t before = 0;      // Eq. 5 of the input split.
  int64_t after = 0;       // Eq. 5 of the chosen split (<= before).
  bool changed = false;    // The clustering's split was taken.
};

// Clusters the paths and keeps the result only if it activates fewer experts than
// `input_group` (same length as paths, values in [0, options.groups)); throws
// std::invalid_argument on mismatched sizes, groups < 1 or paths of different shapes.
RegroupResult RegroupTokens(std::span<const RoutingPath> paths, std::span<const int> input_group,
                            const RegroupOptions& options);

}  // namespace moex::policy

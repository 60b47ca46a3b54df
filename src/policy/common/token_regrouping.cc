#include "policy/common/token_regrouping.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace moex::policy {
namespace {

void CheckGroups(int groups) {
  if (groups < 1) throw std::invalid_argument("token regrouping: groups must be at least 1");
}

// Pairwise Hamming distances, row-major n x n.
std::vector<int64_t> Distances(std::span<const RoutingPath> paths) {
  const size_t n = paths.size();
  std::vector<int64_t> d(n * n, 0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) d[i * n + j] = d[j * n + i] = paths[i].Hamming(paths[j]);
  return d;
}

struct Bisector {
  std::span<const RoutingPath> paths;
  const std::vector<int64_t>& dist;
  const RegroupOptions& options;
  std::mt19937_64& rng;

  int64_t D(int a, int b) const { return dist[static_cast<size_t>(a) * paths.size() + b]; }

  // Eq. 5 of a two-way split of `members` (side[p] for members[p]).
  int64_t Cost(const std::vector<int>& members, const std::vector<int>& side) const {
    RoutingPath union0(paths[0].layers(), paths[0].experts()), union1 = union0;
    for (size_t p = 0; p < members.size(); ++p)
      (side[p] == 0 ? union0 : union1).OrWith(paths[members[p]]);
    return union0.Count() + union1.Count();
  }

  // One clustering from a random first medoid and, when `spread`, the member farthest from
  // it as the second (k-medoids++ style; else a random one): side of each member, exactly
  // size0 on side 0.
  std::vector<int> Cluster(const std::vector<int>& members, int size0, bool spread) {
    const int m = static_cast<int>(members.size());
    int c0 = static_cast<int>(rng() % static_cast<uint64_t>(m));
    int c1 = static_cast<int>(rng() % static_cast<uint64_t>(m - 1));
    if (c1 >= c0) ++c1;
    if (spread)
      for (int p = 0; p < m; ++p)
        if (D(members[p], members[c0]) > D(members[c1], members[c0])) c1 = p;
    std::vector<int> side(m), order(m);
    std::vector<int64_t> margin(m);
    for (int it = 0; it < std::max(1, options.max_iterations); ++it) {
      // Assign by similarity, balanced: rank by how much nearer medoid 0 is than medoid 1
      // and give the first size0 to group 0 (ties by position, so it is deterministic).
      for (int p = 0; p < m; ++p)
        margin[p] = D(members[p], members[c1]) - D(members[p], members[c0]);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return margin[a] > margin[b]; });
      for (int r = 0; r < m; ++r) side[order[r]] = r < size0 ? 0 : 1;
      // Medoid update: the member with the highest average similarity to its group, i.e.
      // the least total distance to it.
      int medoid[2] = {-1, -1};
      int64_t best[2] = {0, 0};
      for (int p = 0; p < m; ++p) {
        int64_t sum = 0;
        for (int q = 0; q < m; ++q)
          if (side[q] == side[p]) sum += D(members[p], members[q]);
        const int s = side[p];
        if (medoid[s] < 0 || sum < best[s]) medoid[s] = p, best[s] = sum;
      }
      if (medoid[0] < 0 || medoid[1] < 0) break;      // One side empty: nothing to move.
      if (medoid[0] == c0 && medoid[1] == c1) break;  // Converged.
      c0 = medoid[0];
      c1 = medoid[1];
    }
    return side;
  }

  // The best of `restarts` clusterings by Eq. 5 (the first on ties); the first starts from
  // far-apart medoids, the others from random ones.
  std::vector<int> Bisect(const std::vector<int>& members, int size0) {
    const int m = static_cast<int>(members.size());
    if (size0 <= 0 || size0 >= m || m < 2) {
      std::vector<int> side(m, size0 <= 0 ? 1 : 0);
      return side;
    }
    std::vector<int> best;
    int64_t best_cost = 0;
    for (int r = 0; r < std::max(1, options.restarts); ++r) {
      std::vector<int> side = Cluster(members, size0, r == 0);
      const int64_t cost = Cost(members, side);
      if (best.empty() || cost < best_cost) best = std::move(side), best_cost = cost;
    }
    return best;
  }

  // Splits `members` into groups [lo, hi) with the sizes `sizes` gives them.
  void Split(const std::vector<int>& members, int lo, int hi, const std::vector<int>& sizes,
             std::vector<int>& group) {
    if (hi - lo == 1) {
      for (int i : members) group[i] = lo;
      return;
    }
    const int mid = lo + (hi - lo) / 2;
    const int size0 = std::accumulate(sizes.begin() + lo, sizes.begin() + mid, 0);
    const std::vector<int> side = Bisect(members, size0);
    std::vector<int> halves[2];
    for (size_t p = 0; p < members.size(); ++p) halves[side[p]].push_back(members[p]);
    Split(halves[0], lo, mid, sizes, group);
    Split(halves[1], mid, hi, sizes, group);
  }
};

}  // namespace

int64_t ActivatedExperts(std::span<const RoutingPath> paths, std::span<const int> group,
                         int groups) {
  CheckGroups(groups);
  if (group.size() != paths.size())
    throw std::invalid_argument("token regrouping: " + std::to_string(group.size()) +
                                " group ids for " + std::to_string(paths.size()) + " paths");
  if (paths.empty()) return 0;
  std::vector<RoutingPath> unions(groups, RoutingPath(paths[0].layers(), paths[0].experts()));
  for (size_t i = 0; i < paths.size(); ++i) {
    if (group[i] < 0 || group[i] >= groups)
      throw std::invalid_argument("token regrouping: group " + std::to_string(group[i]) +
                                  " outside [0, " + std::to_string(groups) + ")");
    unions[group[i]].OrWith(paths[i]);
  }
  int64_t total = 0;
  for (const RoutingPath& u : unions) total += u.Count();
  return total;
}

std::vector<int> BalancedSizes(int n, int groups) {
  CheckGroups(groups);
  if (n < 0) throw std::invalid_argument("token regrouping: negative member count");
  std::vector<int> sizes(groups, n / groups);
  for (int g = 0; g < n % groups; ++g) ++sizes[g];
  return sizes;
}

std::vector<int> ContiguousGroups(int n, int groups) {
  const std::vector<int> sizes = BalancedSizes(n, groups);
  std::vector<int> group;
  group.reserve(n);
  for (int g = 0; g < groups; ++g) group.insert(group.end(), sizes[g], g);
  return group;
}

std::vector<int> BalancedGroups(std::span<const RoutingPath> paths, const RegroupOptions& options) {
  CheckGroups(options.groups);
  const int n = static_cast<int>(paths.size());
  std::vector<int> group(n, 0);
  if (n == 0 || options.groups == 1) return group;
  const std::vector<int64_t> dist = Distances(paths);  // Also checks the shapes.
  std::mt19937_64 rng(options.seed);
  Bisector bisector{paths, dist, options, rng};
  std::vector<int> members(n);
  std::iota(members.begin(), members.end(), 0);
  bisector.Split(members, 0, options.groups, BalancedSizes(n, options.groups), group);
  return group;
}

RegroupResult RegroupTokens(std::span<const RoutingPath> paths, std::span<const int> input_group,
                            const RegroupOptions& options) {
  RegroupResult r;
  r.before = ActivatedExperts(paths, input_group, options.groups);
  r.group.assign(input_group.begin(), input_group.end());
  r.after = r.before;
  std::vector<int> clustered = BalancedGroups(paths, options);
  const int64_t cost = ActivatedExperts(paths, clustered, options.groups);
  if (cost < r.before) {
    r.group = std::move(clustered);
    r.after = cost;
    r.changed = true;
  }
  return r;
}

}  // namespace moex::policy

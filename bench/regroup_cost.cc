// The token scheduler's cost (ExpertFlow §4.2 times it against a forward pass): one
// RegroupTokens call, i.e. what the server's scheduler spends between two units, for random
// routing paths of top-k of E experts over L layers, per number of requests and groups.
//
//   regroup_cost [--layers 16] [--experts 64] [--top-k 8] [--reps 200]
//
// Prints a markdown table: requests, groups, median µs per call, and Eq. 5 before (the
// admission-order split) and after (means over the repetitions).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "policy/common/token_regrouping.h"

namespace {

using moex::policy::ContiguousGroups;
using moex::policy::RegroupOptions;
using moex::policy::RegroupTokens;
using moex::policy::RoutingPath;
using Clock = std::chrono::steady_clock;

int Arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int layers = Arg(argc, argv, "--layers", 16);
  const int experts = Arg(argc, argv, "--experts", 64);
  const int top_k = std::min(Arg(argc, argv, "--top-k", 8), experts);
  const int reps = std::max(1, Arg(argc, argv, "--reps", 200));
  std::mt19937 rng(1);
  std::printf("paths: %d layers x %d experts, top-%d, %d repetitions\n\n", layers, experts, top_k,
              reps);
  std::printf("| requests | groups | median µs | Eq. 5 before | Eq. 5 after |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (int n : {8, 16, 32, 64}) {
    for (int groups : {2, 4}) {
      std::vector<double> us;
      double before = 0, after = 0;
      for (int r = 0; r < reps; ++r) {
        std::vector<RoutingPath> paths;
        for (int i = 0; i < n; ++i) {
          RoutingPath p(layers, experts);
          for (int l = 0; l < layers; ++l) {
            std::vector<int> ids(experts);
            for (int e = 0; e < experts; ++e) ids[e] = e;
            std::shuffle(ids.begin(), ids.end(), rng);
            for (int k = 0; k < top_k; ++k) p.Set(l, ids[k]);
          }
          paths.push_back(p);
        }
        RegroupOptions o;
        o.groups = groups;
        o.seed = static_cast<uint64_t>(r);
        const auto start = Clock::now();
        const auto result = RegroupTokens(paths, ContiguousGroups(n, groups), o);
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
        before += static_cast<double>(result.before);
        after += static_cast<double>(result.after);
      }
      std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
      std::printf("| %d | %d | %.1f | %.1f | %.1f |\n", n, groups, us[us.size() / 2], before / reps,
                  after / reps);
    }
  }
  return 0;
}

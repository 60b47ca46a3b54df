// fMoE's per-iteration matching cost against the Expert Map Store's size (the paper, §6.7:
// map matching and update stay under 30 ms per iteration). Fills a store with random expert
// maps (softmax-like gate distributions) and embeddings, then times, per size, what the
// policy's worker does for one request's pass:
//   semantic    one semantic search (Eq. 4): the embedding against every stored one;
//   trajectory  the L − d trajectory searches of the pass (Eq. 5), incremental, each one
//               more layer plus the best match;
//   match       semantic + trajectory: the matching of one iteration;
//   insert      storing the pass's map into the full store (the redundancy score against
//               every entry, replace the most redundant).
//
//   fmoe_match [--sizes 100,1000,5000] [--dim 2048] [--reps N]
//
// Prints a markdown table (median µs over repetitions).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "policy/fmoe/expert_map_store.h"

namespace {

using moex::policy::ExpertMapStore;
using moex::policy::TrajectoryMatch;
using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int layers, experts;
};

// One gate distribution per layer: a softmax of random logits (sums to 1).
std::vector<float> RandomMap(const Shape& s, std::mt19937& rng) {
  std::normal_distribution<float> logit(0, 2);
  std::vector<float> map(static_cast<size_t>(s.layers) * s.experts);
  for (int l = 0; l < s.layers; ++l) {
    float* row = &map[static_cast<size_t>(l) * s.experts];
    double sum = 0;
    for (int j = 0; j < s.experts; ++j) sum += row[j] = std::exp(logit(rng));
    for (int j = 0; j < s.experts; ++j) row[j] = static_cast<float>(row[j] / sum);
  }
  return map;
}

std::vector<float> RandomVector(int n, std::mt19937& rng) {
  std::normal_distribution<float> v(0, 1);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& x : out) x = v(rng);
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Us(Clock::time_point a) {
  return std::chrono::duration<double, std::micro>(Clock::now() - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {100, 1000, 5000};
  int dim = 2048, reps = 50, distance = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--sizes") {
      sizes.clear();
      for (const char* p = argv[i + 1]; *p;) {
        sizes.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else if (a == "--dim") {
      dim = std::atoi(argv[i + 1]);
    } else if (a == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: fmoe_match [--sizes 100,1000,5000] [--dim 2048] [--reps N]\n");
      return 1;
    }
  }
  const Shape shapes[] = {{"OLMoE 16x64", 16, 64}, {"Mixtral 32x8", 32, 8}};
  std::printf(
      "| model shape | embedding | maps | semantic µs | trajectory µs | match µs | insert µs |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes)
    for (int size : sizes) {
      std::mt19937 rng(1);
      ExpertMapStore store(s.layers, s.experts, size, distance, true);
      for (int y = 0; y < size; ++y) store.Insert(RandomVector(dim, rng), RandomMap(s, rng));
      std::vector<double> sem_us, traj_us, insert_us;
      for (int r = 0; r < reps; ++r) {
        const std::vector<float> sem = RandomVector(dim, rng), map = RandomMap(s, rng);
        auto t = Clock::now();
        volatile int sink = store.MatchSemantic(sem).slot;
        sem_us.push_back(Us(t));
        t = Clock::now();
        TrajectoryMatch match;
        match.Reset(store);
        for (int l = 0; l + distance < s.layers; ++l) {
          match.AddLayer(store, l, &map[static_cast<size_t>(l) * s.experts]);
          sink = match.Best(store).slot;
        }
        traj_us.push_back(Us(t));
        t = Clock::now();
        sink = store.Insert(sem, map);
        insert_us.push_back(Us(t));
        (void)sink;
      }
      std::vector<double> match_us(sem_us.size());
      for (size_t i = 0; i < match_us.size(); ++i) match_us[i] = sem_us[i] + traj_us[i];
      std::printf("| %s | %d | %d | %.1f | %.1f | %.1f | %.1f |\n", s.name, dim, size,
                  Median(sem_us), Median(traj_us), Median(match_us), Median(insert_us));
    }
  return 0;
}

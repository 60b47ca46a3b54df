// MoE-Infinity's EAMC query cost against the collection size (the paper, §6: 21 µs per
// query with 1K EAMs, 226 µs with 10K). Fills an EAM collection with random decode-like
// request EAMs (32 tokens each, top-k experts per token drawn from a per-request skewed
// distribution) and times, per size:
//   full      one whole-iteration query from scratch (all L rows of one token), as the
//             paper's figure measures: AddRow x L + Nearest;
//   gate      what moe-infinity's worker does per gate: one more row of the same query
//             (incremental dot products), Nearest, the sum of the matched EAMs' later rows
//             and the sorted prefetch priorities (mean over the L gates of an iteration);
//   dense     the naive baseline: dense cosine of the flattened L·E query with every entry;
//   insert    inserting one request EAM into the full collection (replace the most similar).
//
//   eamc_query [--sizes 1000,10000] [--matches 1] [--reps N]
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

#include "policy/moe_infinity/eam_collection.h"
#include "policy/moe_infinity/expert_activation_matrix.h"
#include "policy/moe_infinity/moe_infinity_priority.h"

namespace {

using moex::policy::EamcMatcher;
using moex::policy::EamCollection;
using moex::policy::ExpertActivationMatrix;
using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int layers, experts, top_k;
};

// A request of `tokens` tokens: each layer prefers a few experts (skewed reuse, §3.1).
ExpertActivationMatrix RandomRequest(const Shape& s, int tokens, std::mt19937& rng) {
  ExpertActivationMatrix m(s.layers, s.experts);
  std::uniform_int_distribution<int> any(0, s.experts - 1);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < s.layers; ++i) {
    std::vector<int> favourite(static_cast<size_t>(2 * s.top_k));
    for (int& f : favourite) f = any(rng);
    for (int t = 0; t < tokens; ++t) {
      std::vector<int> chosen;
      while (static_cast<int>(chosen.size()) < s.top_k) {
        const int e =
            u(rng) < 0.7 ? favourite[static_cast<size_t>(any(rng)) % favourite.size()] : any(rng);
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      for (int e : chosen) m.Add(i, e);
    }
  }
  return m;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {1000, 10000};
  int matches = 1, reps = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      for (std::string s = argv[++i]; !s.empty();) {
        const size_t comma = s.find(',');
        sizes.push_back(std::atoi(s.substr(0, comma).c_str()));
        s = comma == std::string::npos ? "" : s.substr(comma + 1);
      }
    } else if (a == "--matches" && i + 1 < argc) {
      matches = std::atoi(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: eamc_query [--sizes 1000,10000] [--matches M] [--reps N]\n");
      return 2;
    }
  }
  for (int n : sizes)
    if (n < 1) {
      std::fprintf(stderr, "eamc_query: sizes must be positive\n");
      return 2;
    }
  const Shape shapes[] = {{"OLMoE 16x64 top-8", 16, 64, 8}, {"Arctic 35x128 top-2", 35, 128, 2}};
  std::printf(
      "| model shape | EAMs | full query µs | per-gate job µs | dense query µs | insert µs |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    for (int n : sizes) {
      std::mt19937 rng(42);
      EamCollection c(s.layers, s.experts, n);
      for (int k = 0; k < n; ++k) c.Insert(RandomRequest(s, 32, rng));
      std::vector<double> full, gate, dense, insert;
      std::vector<float> flat(static_cast<size_t>(s.layers) * static_cast<size_t>(s.experts));
      volatile double sink = 0;
      for (int r = 0; r < reps; ++r) {
        const ExpertActivationMatrix q = RandomRequest(s, 1, rng);
        EamcMatcher m;
        auto t0 = Clock::now();
        for (int i = 0; i < s.layers; ++i) m.AddRow(c, i, q.row(i));
        sink = sink + m.Nearest(c, matches, true).size();
        auto t1 = Clock::now();
        full.push_back(Us(t0, t1));

        EamcMatcher g;
        t0 = Clock::now();
        for (int i = 0; i < s.layers; ++i) {
          g.AddRow(c, i, q.row(i));
          std::vector<int> slots;
          for (const auto& match : g.Nearest(c, matches, true)) slots.push_back(match.slot);
          sink = sink + moex::policy::PrefetchPriorities(c.Sum(slots, i + 1), i, 0, true).size();
        }
        t1 = Clock::now();
        gate.push_back(Us(t0, t1) / s.layers);

        std::copy(q.cells().begin(), q.cells().end(), flat.begin());
        t0 = Clock::now();
        double best = 2;
        for (int k = 0; k < c.size(); ++k) {
          double dot = 0, nq = 0, ne = 0;
          for (int i = 0; i < s.layers; ++i)
            for (int j = 0; j < s.experts; ++j) {
              const double a = flat[static_cast<size_t>(i * s.experts + j)], b = c.Cell(k, i, j);
              dot += a * b;
              nq += a * a;
              ne += b * b;
            }
          if (nq > 0 && ne > 0) best = std::min(best, 1 - dot / std::sqrt(nq * ne));
        }
        t1 = Clock::now();
        sink = sink + best;
        dense.push_back(Us(t0, t1));

        if (r < 20) {  // Inserting changes the collection; a few suffice.
          const ExpertActivationMatrix e = RandomRequest(s, 32, rng);
          t0 = Clock::now();
          sink = sink + c.Insert(e);
          insert.push_back(Us(t0, Clock::now()));
        }
      }
      std::printf("| %s | %d | %.2f | %.2f | %.1f | %.1f |\n", s.name, n, Median(full),
                  Median(gate), Median(dense), Median(insert));
      std::fflush(stdout);
    }
  }
  return 0;
}

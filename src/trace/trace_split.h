// Splits a trace by request into a learning part and a test part (EVALUATION.md: the first
// 70 % of requests, in the order they began, learn; the rest test). Batched iterations that
// mix both parts are cut per request, so each part replays exactly its requests' routing.
#pragma once

#include <cstdint>
#include <string>

namespace moex::trace {

struct SplitOptions {
  std::string input;
  std::string learn_out;
  std::string test_out;
  double learn_fraction = 0.7;  // Of requests, rounded to the nearest whole request.
};

struct SplitPart {
  int64_t requests = 0;
  int64_t first_request = 0;  // Ids of the first and last request of the part.
  int64_t last_request = 0;
  int64_t iterations = 0;
};

struct SplitSummary {
  SplitPart learn;
  SplitPart test;
};

// Throws Error for a trace with fewer than two requests, a fraction outside (0, 1), or
// output paths that collide with each other or with the input.
SplitSummary SplitTrace(const SplitOptions& options);

}  // namespace moex::trace

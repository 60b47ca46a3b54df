// Static, cost-balanced split of weighted work items across the workers of a pool. Item j
// has counts[j] elements of cost costs[j] each; worker w of P takes the elements whose cost
// prefix lies in [w*C/P, (w+1)*C/P), C the total. Boundaries inside an item are rounded down
// to multiples of `align`, and neighbouring workers compute the same boundary, so the
// ranges are disjoint and cover everything. (Kernel results never depend on the split.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moex::kernels {

struct WorkRange {
  size_t item;
  size_t begin;
  size_t end;
};

inline std::vector<WorkRange> PartitionWork(std::span<const size_t> counts,
                                            std::span<const uint64_t> costs, size_t align,
                                            size_t worker, size_t workers) {
  uint64_t total = 0;
  for (size_t j = 0; j < counts.size(); ++j) total += counts[j] * costs[j];
  const uint64_t lo = total * worker / workers;
  const uint64_t hi = total * (worker + 1) / workers;
  std::vector<WorkRange> ranges;
  uint64_t start = 0;  // Cost prefix at the first element of item j.
  for (size_t j = 0; j < counts.size(); ++j) {
    const uint64_t size = counts[j] * costs[j];
    const auto boundary = [&](uint64_t c) -> size_t {
      if (c <= start) return 0;
      if (c >= start + size) return counts[j];
      return static_cast<size_t>((c - start) / costs[j]) / align * align;
    };
    const size_t begin = boundary(lo);
    const size_t end = boundary(hi);
    if (begin < end) ranges.push_back({j, begin, end});
    start += size;
  }
  return ranges;
}

}  // namespace moex::kernels

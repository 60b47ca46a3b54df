// The kernels' thread pool: every index is visited exactly once whatever the split, the
// worker index stays in range, and the pool keeps working after its threads went to sleep.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace moex {
namespace {

void ExpectEachIndexOnce(ThreadPool& pool, size_t n, size_t grain, bool dynamic) {
  std::vector<std::atomic<int>> hits(n);
  std::atomic<bool> bad_worker{false};
  const auto fn = [&](size_t b, size_t e, int worker) {
    if (worker < 0 || worker >= pool.size()) bad_worker = true;
    for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
  };
  if (dynamic) {
    pool.ParallelForDynamic(n, grain, fn);
  } else {
    pool.ParallelFor(n, grain, fn);
  }
  ASSERT_FALSE(bad_worker.load());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " grain=" << grain << " i=" << i;
  }
}

TEST(KernelsThreadPoolTest, EveryIndexOnceForAnySplit) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 200; ++round) {
      for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{64}, size_t{1000}}) {
        for (size_t grain : {size_t{1}, size_t{3}, size_t{16}}) {
          ExpectEachIndexOnce(pool, n, grain, false);
          ExpectEachIndexOnce(pool, n, grain, true);
        }
      }
    }
  }
}

TEST(KernelsThreadPoolTest, WorksAfterTheWorkersSlept) {
  ThreadPool pool(2);
  for (int round = 0; round < 3; ++round) {
    ExpectEachIndexOnce(pool, 100, 1, round % 2 == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // Past the polling window.
  }
}

// Ranges of one region run on more than one thread when there is enough work (the pool
// does not silently serialise).
TEST(KernelsThreadPoolTest, UsesSeveralThreads) {
  ThreadPool pool(2);
  std::atomic<int> seen{0};
  for (int attempt = 0; attempt < 50 && seen.load() != 3; ++attempt) {
    pool.ParallelForDynamic(64, 1, [&](size_t, size_t, int worker) {
      seen.fetch_or(1 << worker);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
  }
  EXPECT_EQ(seen.load(), 3);
}

}  // namespace
}  // namespace moex

// A fixed pool of worker threads shared by every kernel, so the process never runs more
// compute threads than cores (no oversubscription). The calling thread takes part.
//
// Decode runs dozens of short parallel regions per token (one per projection), each only
// tens of microseconds long, so a futex wake-up per region would cost as much as the work.
// Workers therefore poll for a short while after each region before they block, and the
// caller polls while it waits. Chunks are claimed from a shared counter, so a thread that
// the OS has descheduled (the machine is shared) neither holds back the region nor is
// waited for unless it already started a chunk.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace moex {

class ThreadPool {
 public:
  // fn(begin, end, worker) is called on disjoint ranges covering [0, n); `worker` is the
  // index (< size()) of the thread that runs the call, for per-thread scratch.
  using RangeFn = std::function<void(size_t begin, size_t end, int worker)>;

  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Splits [0, n) into at most size() contiguous ranges whose boundaries are multiples of
  // `grain` (except the last), runs them in parallel, and returns when all are done. One
  // thread may run several of the ranges.
  void ParallelFor(size_t n, size_t grain, const RangeFn& fn);

  // Splits [0, n) into ranges of exactly `grain` items (the last may be shorter) that the
  // threads claim one at a time: load balance for work whose speed varies between threads.
  void ParallelForDynamic(size_t n, size_t grain, const RangeFn& fn);

  // The process-wide pool; its size comes from MOEX_THREADS or the number of cores.
  static ThreadPool& Global();
  // Must be called before the first Global() to take effect (e.g. from --threads).
  static void SetGlobalThreads(int threads);

 private:
  void Run(size_t n, size_t chunk, const RangeFn& fn) EXCLUDES(run_mutex_, mutex_);
  void RunChunks(int worker);
  void WorkerLoop(int index) EXCLUDES(mutex_);

  // High bit of entered_: the current region is closed to late joiners.
  static constexpr uint32_t kClosed = 1u << 31;

  std::vector<std::thread> workers_;
  // The current region; written under run_mutex_ before entered_ opens it. Not GUARDED_BY:
  // the workers read it without the lock, ordered by entered_.
  const RangeFn* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_chunk_ = 0;
  alignas(64) std::atomic<size_t> next_{0};  // First item not yet claimed.
  // Workers inside the current region, plus kClosed once the caller has stopped claiming.
  alignas(64) std::atomic<uint32_t> entered_{kClosed};
  alignas(64) std::atomic<uint64_t> generation_{0};  // Bumped to wake the workers.
  std::atomic<bool> stop_{false};
  // Sleep fallbacks: how many workers (or whether the caller) block on the condition
  // variables, so the fast path never takes the mutex.
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeps_{false};
  // Only for the sleeping fallbacks: the state the waits test is atomic.
  Mutex mutex_;
  CondVar wake_;
  CondVar done_;
  Mutex run_mutex_;  // One region at a time.
};

}  // namespace moex

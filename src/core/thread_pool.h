// A fixed pool of worker threads shared by every kernel, so the process never runs more
// compute threads than cores (no oversubscription). The calling thread takes part.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moex {

class ThreadPool {
 public:
  // fn(begin, end, worker) is called on disjoint ranges covering [0, n).
  using RangeFn = std::function<void(size_t begin, size_t end, int worker)>;

  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Splits [0, n) into at most size() contiguous ranges whose boundaries are multiples of
  // `grain` (except the last), runs them in parallel, and returns when all are done.
  void ParallelFor(size_t n, size_t grain, const RangeFn& fn);

  // The process-wide pool; its size comes from MOEX_THREADS or the number of cores.
  static ThreadPool& Global();
  // Must be called before the first Global() to take effect (e.g. from --threads).
  static void SetGlobalThreads(int threads);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const RangeFn* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_chunk_ = 0;
  size_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::mutex run_mutex_;  // One ParallelFor at a time.
};

}  // namespace moex

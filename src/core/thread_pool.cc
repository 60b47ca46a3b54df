#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace moex {

namespace {
int g_requested_threads = 0;
}

ThreadPool::ThreadPool(int threads) {
  threads = std::max(threads, 1);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::ParallelFor(size_t n, size_t grain, const RangeFn& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  const size_t units = (n + grain - 1) / grain;
  const size_t parts = std::min<size_t>(units, static_cast<size_t>(size()));
  if (parts <= 1) {
    fn(0, n, 0);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  const size_t chunk = ((units + parts - 1) / parts) * grain;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  fn(0, std::min(chunk, n), 0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  size_t seen = 0;
  for (;;) {
    const RangeFn* job;
    size_t n, chunk;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunk = job_chunk_;
    }
    const size_t begin = static_cast<size_t>(index) * chunk;
    if (begin < n) (*job)(begin, std::min(begin + chunk, n), index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::SetGlobalThreads(int threads) { g_requested_threads = threads; }

ThreadPool& ThreadPool::Global() {
  static std::unique_ptr<ThreadPool> pool = [] {
    int threads = g_requested_threads;
    if (threads <= 0) {
      if (const char* env = std::getenv("MOEX_THREADS")) threads = std::atoi(env);
    }
    if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
    return std::make_unique<ThreadPool>(threads);
  }();
  return *pool;
}

}  // namespace moex

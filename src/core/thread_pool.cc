#include "core/thread_pool.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace moex {

namespace {

int g_requested_threads = 0;

// How long a thread polls before it blocks: long enough to span the serial work between
// the regions of one decode step (norms, routing, sampling), short enough that an idle pool
// gives the cores back quickly.
constexpr auto kSpin = std::chrono::microseconds(500);
// A poller that finds itself descheduled between two clock reads is on an oversubscribed
// machine, where polling only burns the time slice the other threads of the pool need
// (and forfeits the scheduler's wake-up preference): the pool then blocks at once for a
// while.
constexpr auto kPreempted = std::chrono::microseconds(200);
constexpr auto kBackOff = std::chrono::milliseconds(200);
std::atomic<int64_t> g_no_spin_until{0};  // steady_clock ticks.

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Polls pred() for up to kSpin; returns whether it became true.
template <class Pred>
bool SpinUntil(const Pred& pred) {
  using Clock = std::chrono::steady_clock;
  auto now = Clock::now();
  if (now.time_since_epoch().count() < g_no_spin_until.load(std::memory_order_relaxed)) {
    return pred();
  }
  const auto deadline = now + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      CpuRelax();
    }
    const auto last = now;
    now = Clock::now();
    if (now - last > kPreempted) {
      g_no_spin_until.store((now + kBackOff).time_since_epoch().count(), std::memory_order_relaxed);
      return pred();
    }
    if (now >= deadline) return pred();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  threads = std::max(threads, 1);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mutex_);
    stop_.store(true);
  }
  wake_.NotifyAll();
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
  Run(n, ((units + parts - 1) / parts) * grain, fn);
}

void ThreadPool::ParallelForDynamic(size_t n, size_t grain, const RangeFn& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  if (grain >= n || size() == 1) {
    fn(0, n, 0);
    return;
  }
  Run(n, grain, fn);
}

void ThreadPool::RunChunks(int worker) {
  const size_t n = job_n_, chunk = job_chunk_;
  for (;;) {
    const size_t begin = next_.fetch_add(chunk, std::memory_order_relaxed);
    if (begin >= n) return;
    (*job_)(begin, std::min(begin + chunk, n), worker);
  }
}

void ThreadPool::Run(size_t n, size_t chunk, const RangeFn& fn) {
  MutexLock run_lock(&run_mutex_);
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  next_.store(0, std::memory_order_relaxed);
  // Opening keeps the count: a late worker of the previous region may still be between
  // its increment and its decrement (it saw kClosed and touches nothing).
  entered_.fetch_and(~kClosed);
  // seq_cst pairs with a sleeping worker's increment of sleepers_ (Dekker): either we see
  // it and notify, or it sees the new generation before it blocks.
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    MutexLock lock(&mutex_);
    wake_.NotifyAll();
  }
  RunChunks(0);
  // Every chunk is claimed; wait only for the workers that joined.
  entered_.fetch_or(kClosed);
  const auto done = [this] { return entered_.load() == kClosed; };
  if (!SpinUntil(done)) {
    MutexLock lock(&mutex_);
    caller_sleeps_.store(true);
    done_.Wait(lock, done);
    caller_sleeps_.store(false);
  }
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  const auto ready = [&] {
    return generation_.load(std::memory_order_acquire) != seen ||
           stop_.load(std::memory_order_relaxed);
  };
  for (;;) {
    if (!SpinUntil(ready)) {
      MutexLock lock(&mutex_);
      sleepers_.fetch_add(1);
      wake_.Wait(lock, [&] { return generation_.load() != seen || stop_.load(); });
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    // Joining synchronises with the caller's opening RMW, so the job fields are visible;
    // the caller does not return while we are counted.
    if ((entered_.fetch_add(1) & kClosed) == 0) RunChunks(index);
    if (entered_.fetch_sub(1) == kClosed + 1 && caller_sleeps_.load()) {
      MutexLock lock(&mutex_);
      done_.NotifyOne();
    }
  }
}

namespace {

// MOEX_THREADS as a thread count, 0 when unset; a value that is not 1..1024 is ignored
// with a warning that names it.
int ThreadsFromEnvironment() {
  const char* env = std::getenv("MOEX_THREADS");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(env, &end, 10);
  if (errno != 0 || *end != '\0' || v < 1 || v > 1024) {
    std::fprintf(stderr, "moex: ignoring MOEX_THREADS=%s (expected a thread count 1..1024)\n",
                 env);
    return 0;
  }
  return static_cast<int>(v);
}

}  // namespace

void ThreadPool::SetGlobalThreads(int threads) {
  g_requested_threads = threads;
}

ThreadPool& ThreadPool::Global() {
  static std::unique_ptr<ThreadPool> pool = [] {
    int threads = g_requested_threads;
    if (threads <= 0) threads = ThreadsFromEnvironment();
    if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
    return std::make_unique<ThreadPool>(threads);
  }();
  return *pool;
}

}  // namespace moex

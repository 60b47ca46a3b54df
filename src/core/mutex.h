// A mutex, scoped lock and condition variable that clang's thread-safety analysis can see
// (core/thread_annotations.h): thin wrappers over std::mutex, std::unique_lock and
// std::condition_variable, with the same behaviour and cost.
//
//   Mutex mu_;
//   std::deque<Job> queue_ GUARDED_BY(mu_);
//   CondVar ready_;
//   ...
//   MutexLock lock(&mu_);
//   while (queue_.empty()) ready_.Wait(lock);  // the loop keeps the guarded read visible
//
// CondVar's waits release and retake the mutex inside the call; to the analysis the mutex
// stays held throughout, which is what the caller sees. A predicate passed to a wait runs
// as a lambda the analysis checks on its own, so give one only when it reads no guarded
// state (atomics); otherwise loop as above.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "core/thread_annotations.h"

namespace moex {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds the mutex (no run-time check).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction; Unlock/Lock release and retake it in between
// (the destructor releases only if held).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

class CondVar {
 public:
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

  // Blocks until notified (or spuriously woken): call it in a loop over the condition.
  void Wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  // As Wait, giving up at `deadline`; returns false when the deadline has passed.
  template <class Clock, class Duration>
  bool WaitUntil(MutexLock& lock, const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv_.wait_until(lock.lock_, deadline) == std::cv_status::no_timeout;
  }
  // Waits until pred() holds; `pred` must read no state guarded by the mutex (see above).
  template <class Pred>
  void Wait(MutexLock& lock, Pred pred) {
    cv_.wait(lock.lock_, pred);
  }

 private:
  std::condition_variable cv_;
};

}  // namespace moex

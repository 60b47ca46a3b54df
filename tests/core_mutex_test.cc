// The annotated Mutex / MutexLock / CondVar that the locking rules use (core/mutex.h).
#include "core/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace moex {
namespace {

TEST(Mutex, CondVarWaitsForTheGuardedState) {
  Mutex mu;
  CondVar cv;
  bool ready = false;  // Guarded by mu (a local cannot carry GUARDED_BY).
  std::thread setter([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.NotifyAll();
  });
  {
    MutexLock lock(&mu);
    while (!ready) cv.Wait(lock);
    EXPECT_TRUE(ready);
  }
  setter.join();
}

TEST(Mutex, WaitUntilReportsTheDeadline) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  while (cv.WaitUntil(lock, deadline)) {
  }  // Only spurious wake-ups: nobody notifies.
  EXPECT_GE(std::chrono::steady_clock::now(), deadline);
  // Unlock and Lock release and retake it: another thread can take it in between.
  lock.Unlock();
  std::thread([&] { MutexLock other(&mu); }).join();
  lock.Lock();
}

}  // namespace
}  // namespace moex

// Fed to scripts/check-thread-safety.sh by ctest `thread_safety_accepts_guarded_access`:
// the patterns the sources use (a scoped lock, a helper that requires the lock, a wait loop
// over guarded state, unlocking around work), all correct.
#include <deque>

#include "core/mutex.h"

namespace {

class Queue {
 public:
  void Push(int v) EXCLUDES(mu_) {
    {
      moex::MutexLock lock(&mu_);
      items_.push_back(v);
    }
    ready_.NotifyOne();
  }

  int Pop() EXCLUDES(mu_) {
    moex::MutexLock lock(&mu_);
    while (items_.empty()) ready_.Wait(lock);
    const int v = TakeFront();
    lock.Unlock();
    Work(v);
    lock.Lock();
    ++popped_;
    return v;
  }

 private:
  int TakeFront() REQUIRES(mu_) {
    const int v = items_.front();
    items_.pop_front();
    return v;
  }
  static void Work(int) {}

  moex::Mutex mu_;
  moex::CondVar ready_;
  std::deque<int> items_ GUARDED_BY(mu_);
  int popped_ GUARDED_BY(mu_) = 0;
};

}  // namespace

// Fed to scripts/check-thread-safety.sh by ctest `thread_safety_catches_an_unguarded_access`:
// Bump() writes count_ without holding mu_, which the check must reject.
#include "core/mutex.h"

namespace {

class Counter {
 public:
  void Bump() { ++count_; }  // Wrong on purpose: mu_ is not held.

 private:
  moex::Mutex mu_;
  int count_ GUARDED_BY(mu_) = 0;
};

}  // namespace

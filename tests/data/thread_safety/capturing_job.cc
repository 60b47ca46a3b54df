// Fed to the compiler by ctest `policy_job_cannot_capture`: a policy job that captures
// `this` does not compile with PolicyWorker's snapshot form of Submit.
#include "policy/policy_worker.h"

namespace {

class Policy {
 public:
  void Submit(moex::policy::PolicyWorker& worker) {
    worker.Submit(
        0, [this](const int& x) { return x + state_; },  // Wrong on purpose: captures this.
        [](const int&, moex::policy::Decisions*) {});
  }

 private:
  int state_ = 0;
};

}  // namespace

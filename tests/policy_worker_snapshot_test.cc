// PolicyWorker's snapshot form of Submit: the job computes on a copy taken at submission,
// through a function that cannot capture the policy; its apply step gets the result at the
// next poll, in every mode. (That a capturing lambda does not compile is ctest
// `policy_job_cannot_capture`.)
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "policy/policy_worker.h"

namespace moex::policy {
namespace {

TEST(PolicyWorkerSnapshot, ComputesOnTheCopyAndAppliesAtThePoll) {
  for (auto mode :
       {PolicyWorker::Mode::kSync, PolicyWorker::Mode::kAsync, PolicyWorker::Mode::kModelled}) {
    PolicyWorker worker(mode);
    std::vector<int> counts{1, 2, 3};
    int applied = -1;
    worker.Submit(
        counts, [](const std::vector<int>& c) { return std::accumulate(c.begin(), c.end(), 0); },
        [&applied](const int& sum, Decisions* d) {
          applied = sum;
          d->cancel.push_back({0, sum});
        },
        /*modelled_us=*/0);
    counts.push_back(100);  // After submission: not in the job's copy.
    worker.Drain();
    EXPECT_EQ(applied, -1) << "apply runs at the poll, on the driver's thread";
    Decisions d;
    worker.Flush(&d);
    EXPECT_EQ(applied, 6) << PolicyWorker::ModeName(mode);
    EXPECT_EQ(d.cancel, (std::vector<ExpertKey>{{0, 6}}));
    EXPECT_EQ(worker.jobs_run(), 1);
  }
}

}  // namespace
}  // namespace moex::policy

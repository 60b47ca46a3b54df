// Heavy policy work off the forward pass (docs/design.md, "Policies"): matching against a
// collection of past requests, predictor inference. A policy submits a job that computes on
// a snapshot taken by value and returns an Apply step; the driver runs the Apply steps of
// finished jobs, in submission order, on its own thread at the next event, where they may
// update the policy and emit decisions. The forward pass never waits for a job.
//
// Submit makes that contract a type: the computation is a function of the snapshot alone (a
// captureless lambda or a function, so it cannot reach the policy through `this`), and only
// the apply step, which runs on the driver's thread, sees the policy. State a policy's jobs
// own across calls (a collection they match against and grow) travels in the snapshot as a
// shared pointer that only jobs touch; what the driver also reads (a trained predictor)
// travels as a pointer to const, replaced, never changed, when learning publishes anew.
//
// Modes:
//  - kSync: the job runs inside Submit; its Apply runs at the next poll (deterministic;
//    engine and simulator agree exactly).
//  - kAsync: the engine's mode: one worker thread; a job's Apply runs at the first poll
//    after it finished.
//  - kModelled: the simulator's mode: the job runs inside Submit (deterministic result),
//    and its Apply is released once simulated time has passed its submission time plus
//    its cost: the declared cost when given (deterministic), else the measured run time.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "core/mutex.h"
#include "policy/events.h"

namespace moex::policy {

class PolicyWorker {
 public:
  using Apply = std::function<void(Decisions*)>;
  using Job = std::function<Apply()>;
  enum class Mode { kSync, kAsync, kModelled };

  explicit PolicyWorker(Mode mode);
  ~PolicyWorker();
  PolicyWorker(const PolicyWorker&) = delete;
  PolicyWorker& operator=(const PolicyWorker&) = delete;

  Mode mode() const { return mode_; }
  // Runs compute(snapshot) as a job, then apply(result, decisions) as its Apply step.
  // `compute` must convert to Result (*)(const Snapshot&): a function, or a lambda that
  // captures nothing. Snapshot and Result must be copyable. `modelled_us`: the job's cost
  // for the simulator (< 0: use its measured time).
  template <class Snapshot, class Compute, class ApplyFn>
  void Submit(Snapshot snapshot, Compute compute, ApplyFn apply, double modelled_us = -1);
  // kModelled: the simulated clock (µs) that decides when a job's Apply is released.
  void set_clock(std::function<double()> now_us) { clock_ = std::move(now_us); }
  // Runs the Apply steps that are ready, oldest first, stopping at the first job that is
  // not ready yet (so Apply steps always run in submission order). A job that threw has its
  // exception raised here, in the caller's thread, in place of its Apply step.
  void Poll(Decisions* out) EXCLUDES(mutex_);
  // Blocks until every submitted job has finished (tests, end of a run).
  void Drain() EXCLUDES(mutex_);
  // Drain, then run every Apply step whatever its modelled time (end of learning).
  void Flush(Decisions* out) EXCLUDES(mutex_);

  // Measured CPU time of jobs, and how many ran.
  double job_us() const EXCLUDES(mutex_);
  int64_t jobs_run() const EXCLUDES(mutex_);
  int64_t pending() const EXCLUDES(mutex_);

  static Mode ParseMode(const std::string& text);
  static const char* ModeName(Mode mode);

 private:
  struct Entry {
    Job job;
    Apply apply;
    bool done = false;
    double ready_us = 0;         // kModelled: when Apply may run.
    std::exception_ptr error{};  // What the job threw: raised by the Poll that reaches it.
  };
  void SubmitJob(Job job, double modelled_us) EXCLUDES(mutex_);
  void RunLoop() EXCLUDES(mutex_);
  void PollUpTo(Decisions* out, bool ignore_time) EXCLUDES(mutex_);
  double Run(Entry& entry);  // Runs the job, returns its measured time (µs).

  Mode mode_;
  mutable Mutex mutex_;
  CondVar wake_, finished_;
  std::deque<Entry> entries_ GUARDED_BY(mutex_);  // Submission order.
  // kAsync: index of the first entry not started.
  size_t next_to_run_ GUARDED_BY(mutex_) = 0;
  bool stop_ GUARDED_BY(mutex_) = false;
  double job_us_ GUARDED_BY(mutex_) = 0;
  int64_t jobs_run_ GUARDED_BY(mutex_) = 0;
  // The driver's thread only, like busy_until_us_.
  std::function<double()> clock_;
  double busy_until_us_ = 0;  // kModelled: jobs run one after another on one worker.
  std::thread thread_;
};

template <class Snapshot, class Compute, class ApplyFn>
void PolicyWorker::Submit(Snapshot snapshot, Compute compute, ApplyFn apply, double modelled_us) {
  using Result = std::invoke_result_t<Compute&, const Snapshot&>;
  static_assert(std::is_convertible_v<Compute, Result (*)(const Snapshot&)>,
                "a policy job computes on its snapshot alone: pass a function, or a lambda "
                "that captures nothing (capturing `this` would read the policy off its thread)");
  static_assert(std::is_invocable_v<ApplyFn&, const Result&, Decisions*>,
                "the apply step is called as apply(const Result&, Decisions*)");
  Result (*const fn)(const Snapshot&) = compute;
  SubmitJob(
      [snapshot = std::move(snapshot), fn, apply = std::move(apply)]() -> Apply {
        return [result = fn(snapshot), apply](Decisions* out) { apply(result, out); };
      },
      modelled_us);
}

}  // namespace moex::policy

#include "policy/policy_worker.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "core/error.h"

namespace moex::policy {

PolicyWorker::PolicyWorker(Mode mode) : mode_(mode) {
  if (mode_ == Mode::kAsync) thread_ = std::thread([this] { RunLoop(); });
}

PolicyWorker::~PolicyWorker() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&mutex_);
    stop_ = true;
  }
  wake_.NotifyAll();
  thread_.join();
}

double PolicyWorker::Run(Entry& e) {
  const auto start = std::chrono::steady_clock::now();
  try {
    e.apply = e.job();
  } catch (...) {
    // Raised again where its Apply would have run, on the driver's thread: a failing job
    // is an error of the run, never a crash of the worker thread.
    e.error = std::current_exception();
  }
  e.job = nullptr;  // Free what the job captured.
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

void PolicyWorker::SubmitJob(Job job, double modelled_us) {
  if (mode_ == Mode::kAsync) {
    {
      MutexLock lock(&mutex_);
      entries_.push_back({std::move(job), nullptr, false, 0});
    }
    wake_.NotifyOne();
    return;
  }
  Entry e{std::move(job), nullptr, false, 0};
  const double took = Run(e);
  e.done = true;
  if (mode_ == Mode::kModelled) {
    const double now = clock_ ? clock_() : 0;
    const double start = std::max(now, busy_until_us_);
    busy_until_us_ = start + (modelled_us >= 0 ? modelled_us : took);
    e.ready_us = busy_until_us_;
  }
  MutexLock lock(&mutex_);
  job_us_ += took;
  ++jobs_run_;
  entries_.push_back(std::move(e));
}

void PolicyWorker::RunLoop() {
  MutexLock lock(&mutex_);
  for (;;) {
    while (!stop_ && next_to_run_ >= entries_.size()) wake_.Wait(lock);
    if (stop_) return;
    // Deque references stay valid while others push at the back; only Poll pops from the
    // front, and it never pops an entry that is not done.
    Entry& e = entries_[next_to_run_];
    lock.Unlock();
    const double took = Run(e);
    lock.Lock();
    e.done = true;
    ++next_to_run_;
    job_us_ += took;
    ++jobs_run_;
    finished_.NotifyAll();
  }
}

void PolicyWorker::Poll(Decisions* out) {
  PollUpTo(out, false);
}

void PolicyWorker::Flush(Decisions* out) {
  Drain();
  PollUpTo(out, true);
}

void PolicyWorker::PollUpTo(Decisions* out, bool ignore_time) {
  const double now = mode_ == Mode::kModelled && clock_ ? clock_() : 0;
  for (;;) {
    Apply apply;
    std::exception_ptr error;
    {
      MutexLock lock(&mutex_);
      if (entries_.empty()) return;
      Entry& e = entries_.front();
      if (!e.done) return;
      if (mode_ == Mode::kModelled && !ignore_time && e.ready_us > now) return;
      apply = std::move(e.apply);
      error = e.error;
      entries_.pop_front();
      if (mode_ == Mode::kAsync) --next_to_run_;
    }
    if (error) std::rethrow_exception(error);
    if (apply) apply(out);  // Outside the lock: it may submit more work.
  }
}

void PolicyWorker::Drain() {
  MutexLock lock(&mutex_);
  while (next_to_run_ < entries_.size() && mode_ == Mode::kAsync) finished_.Wait(lock);
}

double PolicyWorker::job_us() const {
  MutexLock lock(&mutex_);
  return job_us_;
}

int64_t PolicyWorker::jobs_run() const {
  MutexLock lock(&mutex_);
  return jobs_run_;
}

int64_t PolicyWorker::pending() const {
  MutexLock lock(&mutex_);
  return static_cast<int64_t>(entries_.size());
}

PolicyWorker::Mode PolicyWorker::ParseMode(const std::string& text) {
  if (text == "sync") return Mode::kSync;
  if (text == "async") return Mode::kAsync;
  if (text == "modelled") return Mode::kModelled;
  Fail("unknown policy worker mode '", text, "' (valid: sync, async, modelled)");
}

const char* PolicyWorker::ModeName(Mode mode) {
  switch (mode) {
    case Mode::kSync:
      return "sync";
    case Mode::kAsync:
      return "async";
    case Mode::kModelled:
      return "modelled";
  }
  return "?";
}

}  // namespace moex::policy

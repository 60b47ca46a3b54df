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
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
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

void PolicyWorker::Submit(Job job, double modelled_us) {
  if (mode_ == Mode::kAsync) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      entries_.push_back({std::move(job), nullptr, false, 0});
    }
    wake_.notify_one();
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
  std::lock_guard<std::mutex> lock(mutex_);
  job_us_ += took;
  ++jobs_run_;
  entries_.push_back(std::move(e));
}

void PolicyWorker::RunLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || next_to_run_ < entries_.size(); });
    if (stop_) return;
    // Deque references stay valid while others push at the back; only Poll pops from the
    // front, and it never pops an entry that is not done.
    Entry& e = entries_[next_to_run_];
    lock.unlock();
    const double took = Run(e);
    lock.lock();
    e.done = true;
    ++next_to_run_;
    job_us_ += took;
    ++jobs_run_;
    finished_.notify_all();
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
      std::lock_guard<std::mutex> lock(mutex_);
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
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [&] { return next_to_run_ >= entries_.size() || mode_ != Mode::kAsync; });
}

double PolicyWorker::job_us() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return job_us_;
}

int64_t PolicyWorker::jobs_run() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return jobs_run_;
}

int64_t PolicyWorker::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
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

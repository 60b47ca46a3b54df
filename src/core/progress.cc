#include "core/progress.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "core/mutex.h"

namespace moex {

namespace {
Mutex g_latest_mutex;
ProgressReport g_latest GUARDED_BY(g_latest_mutex);
}  // namespace

void PublishProgress(const std::string& what, int64_t done, int64_t total) {
  const MutexLock lock(&g_latest_mutex);
  g_latest = {what, done, total};
}

ProgressReport LatestProgress() {
  const MutexLock lock(&g_latest_mutex);
  return g_latest;
}

Progress::Progress(std::string what, int64_t total, bool only_on_terminal)
    : what_(std::move(what)), total_(total), tty_(isatty(STDERR_FILENO) != 0) {
  enabled_ = total_ > 0 && (tty_ || !only_on_terminal);
}

Progress::~Progress() {
  if (open_line_) std::fputc('\n', stderr);
}

void Progress::Update(int64_t done) {
  if (total_ > 0) PublishProgress(what_, done, total_);
  if (!enabled_) return;
  if (tty_) {
    std::fprintf(stderr, "\rmoex: %s %lld/%lld", what_.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total_));
    open_line_ = done < total_;
    if (!open_line_) std::fputc('\n', stderr);
  } else {
    const int64_t tenth = done * 10 / total_;
    if (tenth == last_tenth_) return;
    last_tenth_ = tenth;
    std::fprintf(stderr, "moex: %s %lld/%lld\n", what_.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total_));
  }
  std::fflush(stderr);
}

}  // namespace moex

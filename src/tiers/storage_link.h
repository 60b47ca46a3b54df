// The storage -> host link: reads from the expert store with io_uring, many reads in
// flight, with O_DIRECT so the page cache never becomes a hidden second expert cache.
// Filesystems without O_DIRECT (tmpfs) fall back to buffered reads, with a log line.
#pragma once

#include <liburing.h>

#include <atomic>
#include <string>
#include <thread>

#include "core/mutex.h"
#include "tiers/transfer_link.h"

namespace moex::tiers {

class StorageLink : public TransferLink {
 public:
  // Opens `path` for reading. queue_depth: reads in flight at most. try_direct = false
  // forces the buffered path (the one taken where O_DIRECT is refused).
  StorageLink(const std::string& path, int queue_depth, bool try_direct = true);
  ~StorageLink() override;

  std::string name() const override { return "storage"; }
  int max_in_flight() const override { return queue_depth_; }
  // Starts the reaper thread: creating it after the callback (and everything its owner built
  // before) is what orders them before every completion -- the ring itself goes through the
  // kernel, which ThreadSanitizer cannot see. Once only.
  void SetOnComplete(OnComplete fn) override;
  void Submit(const Transfer& t) override EXCLUDES(submit_mutex_);

  bool direct() const { return direct_; }
  const std::string& path() const { return path_; }

  // Fault injection for tests: the read that completes `after` reads from now fails with
  // EIO (after = 0: the next one). Also settable with MOEX_FAULT_READ_AFTER=N.
  void InjectReadError(int64_t after) { fail_countdown_.store(after); }

 private:
  void ReapLoop();

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  int queue_depth_;
  io_uring ring_;
  // Serialises the ring's submission side; ring_ is not GUARDED_BY it because the reaper
  // reads the completion side without it.
  Mutex submit_mutex_;
  std::thread reaper_;
  OnComplete on_complete_;
  std::atomic<int64_t> fail_countdown_{-1};
};

}  // namespace moex::tiers

#include "tiers/storage_link.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "core/logging.h"

namespace moex::tiers {

namespace {
constexpr uint64_t kStopTag = ~0ull;
}  // namespace

StorageLink::StorageLink(const std::string& path, int queue_depth, bool try_direct)
    : path_(path), queue_depth_(queue_depth) {
  errno = EINVAL;
  if (try_direct) fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  direct_ = fd_ >= 0;
  if (!try_direct) {
    Log(LogLevel::kInfo, "reading experts from ", path, " without O_DIRECT (requested)");
    fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } else if (fd_ < 0 && errno == EINVAL) {
    Log(LogLevel::kWarn, "the filesystem of ", path, " does not support O_DIRECT; reading ",
        "experts through the page cache (it is then a second, unbudgeted cache)");
    fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  Check(fd_ >= 0, "cannot open expert store ", path, ": ", std::strerror(errno));
  const int rc = io_uring_queue_init(static_cast<unsigned>(queue_depth * 2), &ring_, 0);
  if (rc < 0) {
    close(fd_);
    Fail("io_uring_queue_init failed: ", std::strerror(-rc));
  }
  if (const char* env = std::getenv("MOEX_FAULT_READ_AFTER")) fail_countdown_ = std::atoll(env);
}

void StorageLink::SetOnComplete(OnComplete fn) {
  Check(!reaper_.joinable(), "storage link: the completion callback is set once");
  on_complete_ = std::move(fn);
  reaper_ = std::thread([this] { ReapLoop(); });
}

StorageLink::~StorageLink() {
  if (reaper_.joinable()) {
    MutexLock lock(&submit_mutex_);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, kStopTag);
    io_uring_submit(&ring_);
  }
  if (reaper_.joinable()) reaper_.join();
  io_uring_queue_exit(&ring_);
  close(fd_);
}

void StorageLink::Submit(const Transfer& t) {
  MutexLock lock(&submit_mutex_);
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  while (sqe == nullptr) {  // Ring sized 2x the depth: only transiently full.
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  io_uring_prep_read(sqe, fd_, t.dst, t.bytes, t.src_offset);
  io_uring_sqe_set_data64(sqe, t.tag);
  io_uring_submit(&ring_);
}

void StorageLink::ReapLoop() {
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) {
      Log(LogLevel::kError, "io_uring_wait_cqe: ", std::strerror(-rc));
      continue;
    }
    const uint64_t tag = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (tag == kStopTag) return;
    int result = res;
    std::string message;
    if (res < 0) message = std::string("read failed: ") + std::strerror(-res);
    if (res >= 0 && fail_countdown_.load() >= 0 && fail_countdown_.fetch_sub(1) == 0) {
      result = -EIO;
      message = "read failed: injected I/O error";
    }
    on_complete_(tag, result, message);
  }
}

}  // namespace moex::tiers

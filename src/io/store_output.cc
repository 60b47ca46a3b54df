#include "io/store_output.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/logging.h"
#include "io/expert_store_format.h"

namespace moex {

namespace {

namespace fs = std::filesystem;

bool StartsWithStoreMagic(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[sizeof kExpertStoreMagic] = {};
  const ssize_t got = ::pread(fd, magic, sizeof magic, 0);
  ::close(fd);
  return got == static_cast<ssize_t>(sizeof magic) &&
         std::memcmp(magic, kExpertStoreMagic, sizeof magic) == 0;
}

fs::path ParentOf(const fs::path& path) {
  const fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

}  // namespace

std::string CheckStoreTarget(const std::string& path) {
  Check(!path.empty(), "expert store: no path given");
  std::string target = path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    Check(errno == ENOENT, "expert store path ", path, ": ", std::strerror(errno));
    return target;  // A new file.
  }
  if (S_ISLNK(st.st_mode)) {
    // A link inside the store's directory (e.g. to a versioned file) is followed; one that
    // leaves it could point anywhere, so it is refused.
    std::error_code ec;
    fs::path link = fs::read_symlink(path, ec);
    Check(!ec, "expert store path ", path, " is an unreadable symlink: ", ec.message());
    if (link.is_relative()) link = ParentOf(fs::path(path)) / link;
    const fs::path resolved = fs::weakly_canonical(link, ec);
    Check(!ec, "expert store path ", path, " is a broken symlink: ", ec.message());
    const fs::path dir = fs::weakly_canonical(ParentOf(fs::absolute(path)), ec);
    Check(!ec && ParentOf(resolved) == dir, "expert store path ", path, " is a symlink to ",
          resolved.string(), ", outside its directory; refusing to write through it");
    target = resolved.string();
    if (::stat(target.c_str(), &st) != 0) return target;  // Dangling inside the directory.
  }
  Check(!S_ISDIR(st.st_mode), "expert store path ", path, " is a directory; name a file, e.g. ",
        (fs::path(path) / "experts.moex").string());
  Check(S_ISREG(st.st_mode), "expert store path ", path,
        " is not a regular file (a device, pipe or socket); refusing to replace it");
  Check(StartsWithStoreMagic(target), "expert store path ", path,
        " exists and is not a moex expert store; refusing to overwrite it (remove it or "
        "choose another path)");
  return target;
}

std::string UniqueTempPath(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".partial." + std::to_string(::getpid()) + "." + std::to_string(++counter);
}

int64_t CheckRoomFor(const std::string& dir, uint64_t bytes, const std::string& what,
                     const std::string& path_option) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return -1;
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes < bytes) {
    char need[32], have[32];
    std::snprintf(need, sizeof need, "%.2f", bytes / 1e9);
    std::snprintf(have, sizeof have, "%.2f", free_bytes / 1e9);
    Fail(what, " needs ", need, " GB and ", dir, " has ", have,
         " GB free; free space or put it "
         "elsewhere with ",
         path_option, " FILE (nothing was written)");
  }
  return static_cast<int64_t>(free_bytes);
}

StoreLock::StoreLock(const std::string& store_path) : lock_path_(store_path + ".lock") {
  bool told = false;
  for (;;) {
    fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    Check(fd_ >= 0, "cannot create lock file ", lock_path_, ": ", std::strerror(errno),
          " (is the directory writable? --store puts the expert store elsewhere)");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (!told)
        Log(LogLevel::kWarn, "another process is packing ", store_path, "; waiting for it");
      told = true;
      while (::flock(fd_, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd_);
        Fail("cannot lock ", lock_path_, ": ", std::strerror(err));
      }
    }
    // The holder removes the file as it lets go, so a lock won on a file that is no longer
    // at lock_path_ guards nothing a newcomer would see: take the one there now instead.
    struct stat held {
    }, now{};
    if (::fstat(fd_, &held) == 0 && ::stat(lock_path_.c_str(), &now) == 0 &&
        held.st_dev == now.st_dev && held.st_ino == now.st_ino)
      return;
    ::close(fd_);
  }
}

StoreLock::~StoreLock() {
  // Removed while still held (no stray .lock beside the store); closing releases it.
  ::unlink(lock_path_.c_str());
  ::close(fd_);
}

}  // namespace moex

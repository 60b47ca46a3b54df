#include "io/store_output.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
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

StoreLock::StoreLock(const std::string& store_path) {
  const std::string lock_path = store_path + ".lock";
  fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  Check(fd_ >= 0, "cannot create lock file ", lock_path, ": ", std::strerror(errno),
        " (is the directory writable? --store puts the expert store elsewhere)");
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  Log(LogLevel::kWarn, "another process is packing ", store_path, "; waiting for it");
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd_);
    Fail("cannot lock ", lock_path, ": ", std::strerror(err));
  }
}

StoreLock::~StoreLock() {
  if (fd_ >= 0) ::close(fd_);  // Closing releases the lock.
}

}  // namespace moex

#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace moex {

namespace {

// Closes the descriptor on every path out of the constructor; the mapping outlives it.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) Fail("cannot open ", path, ": no such file");
    if (err == EACCES) Fail("cannot open ", path, ": permission denied");
    Fail("cannot open ", path, ": ", std::strerror(err));
  }
  FdCloser closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) Fail("cannot stat ", path, ": ", std::strerror(errno));
  Check(S_ISREG(st.st_mode), "cannot map ", path, ": not a regular file");
  Check(st.st_size > 0, "cannot map ", path, ": file is empty");
  size_ = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) Fail("cannot map ", path, ": ", std::strerror(errno));
  data_ = static_cast<const std::byte*>(p);
}

MappedFile::~MappedFile() {
  Unmap();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::ReleasePages(const std::byte* p, size_t n) const {
  if (n == 0 || !Contains(p)) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = std::min(reinterpret_cast<uintptr_t>(p) + n, base + size_);
  if (begin < base || end <= begin) return;
  // A read-only private file mapping that was never written: dropping it loses nothing.
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void MappedFile::Unmap() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace moex

#include "io/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace moex {

namespace {

constexpr size_t kBufferBytes = 1 << 20;
constexpr size_t kFillChunkBytes = 8 << 20;

[[noreturn]] void FailWrite(const std::string& path, int err) {
  if (err == ENOSPC) Fail("writing ", path, ": no space left on device (disk full)");
  if (err == EFBIG) Fail("writing ", path, ": file too large for this file system or limit");
  Fail("writing ", path, ": ", std::strerror(err));
}

}  // namespace

ByteFill FillFromMemory(const void* data, size_t nbytes) {
  const auto* base = static_cast<const std::byte*>(data);
  return [base, nbytes](size_t offset, std::span<std::byte> out) {
    Check(offset <= nbytes && out.size() <= nbytes - offset, "tensor fill out of range");
    std::memcpy(out.data(), base + offset, out.size());
  };
}

OutputFile::OutputFile(std::string path)
    : path_(std::move(path)), temp_path_(path_ + ".tmp." + std::to_string(::getpid())) {
  // The rename would replace whatever is at the path: only a regular file may be replaced
  // (never a directory, a device node such as /dev/null, or a symlink's link).
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) {
    Check(!S_ISDIR(st.st_mode), "cannot write ", path_, ": it is a directory");
    Check(S_ISREG(st.st_mode), "cannot write ", path_,
          ": it is not a regular file (a device, pipe, socket or symlink); refusing to replace it");
  }
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) Fail("cannot create ", temp_path_, ": ", std::strerror(errno));
  temp_live_ = true;
  buffer_.resize(kBufferBytes);
}

OutputFile::~OutputFile() {
  Abort();
}

void OutputFile::Write(const void* data, size_t n) {
  Check(fd_ >= 0, "writing ", path_, ": file already closed");
  if (n == 0) return;  // `data` may be null then (an empty vector's data()).
  const auto* p = static_cast<const std::byte*>(data);
  if (buffered_ + n <= buffer_.size()) {
    std::memcpy(buffer_.data() + buffered_, p, n);
    buffered_ += n;
    return;
  }
  Flush();
  if (n < buffer_.size()) {
    std::memcpy(buffer_.data(), p, n);
    buffered_ = n;
  } else {
    WriteRaw(p, n);
  }
}

void OutputFile::WriteZeros(size_t n) {
  static const std::byte kZeros[4096] = {};
  while (n > 0) {
    const size_t k = std::min(n, sizeof kZeros);
    Write(kZeros, k);
    n -= k;
  }
}

void OutputFile::WriteFilled(size_t nbytes, size_t row_bytes, const ByteFill& fill) {
  if (nbytes == 0) return;
  if (row_bytes == 0 || nbytes % row_bytes != 0) row_bytes = nbytes;
  const size_t chunk = std::max(row_bytes, kFillChunkBytes / row_bytes * row_bytes);
  std::vector<std::byte> piece(std::min(chunk, nbytes));
  for (size_t offset = 0; offset < nbytes;) {
    const size_t n = std::min(piece.size(), nbytes - offset);
    fill(offset, std::span<std::byte>(piece.data(), n));
    Write(piece.data(), n);
    offset += n;
  }
}

void OutputFile::Flush() {
  if (buffered_ == 0) return;
  const size_t n = buffered_;
  buffered_ = 0;
  WriteRaw(buffer_.data(), n);
}

void OutputFile::WriteRaw(const void* data, size_t n) {
  const auto* p = static_cast<const std::byte*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd_, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      FailWrite(path_, errno);
    }
    if (k == 0) FailWrite(path_, ENOSPC);
    p += k;
    n -= static_cast<size_t>(k);
    written_ += static_cast<uint64_t>(k);
  }
}

void OutputFile::Commit() {
  Check(fd_ >= 0, "writing ", path_, ": file already closed");
  Flush();
  // Some file systems report a full disk only at sync or close time.
  if (::fdatasync(fd_) != 0 && errno != EINVAL) FailWrite(path_, errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) FailWrite(path_, errno);
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    Fail("cannot rename ", temp_path_, " to ", path_, ": ", std::strerror(errno));
  temp_live_ = false;
}

void OutputFile::Abort() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  if (temp_live_) ::unlink(temp_path_.c_str());
  temp_live_ = false;
  buffered_ = 0;
}

}  // namespace moex

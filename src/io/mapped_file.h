// A read-only memory mapping of a whole file. Model files are mapped, never read into
// buffers, so tensors can be viewed in place and pages come in on demand.
#pragma once

#include <cstddef>
#include <string>

namespace moex {

class MappedFile {
 public:
  // Throws Error naming the path when the file is missing, unreadable, not a regular file,
  // empty, or cannot be mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  bool Contains(const std::byte* p) const { return p >= data_ && p < data_ + size_; }
  // Drops the pages covering [p, p + n) from this process's resident set (the bytes stay
  // in the file and come back from the page cache if read again). Ranges outside the
  // mapping are ignored.
  void ReleasePages(const std::byte* p, size_t n) const;

 private:
  void Unmap();

  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace moex

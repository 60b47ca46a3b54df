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

 private:
  void Unmap();

  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace moex

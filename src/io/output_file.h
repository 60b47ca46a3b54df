// Crash-safe output for model files: bytes go to a temporary file next to the final path,
// which is renamed into place only after every write (and the final sync) succeeded. A
// failed or abandoned write removes the temporary, so a half-written file never appears
// under the final name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace moex {

// Fills `out` with the bytes of a tensor starting at byte `offset`. Writers call it with
// pieces of a few MiB whose offset and size are multiples of the tensor's row size, so a
// 14 GB tensor never has to exist in memory at once.
using ByteFill = std::function<void(size_t offset, std::span<std::byte> out)>;

// A ByteFill that copies from caller-owned memory, which must stay alive until written.
ByteFill FillFromMemory(const void* data, size_t nbytes);

class OutputFile {
 public:
  // Creates `path`.tmp.<pid>; throws Error if it cannot be created, or if `path` exists and
  // is not a regular file (a directory, device, pipe, socket or symlink).
  explicit OutputFile(std::string path);
  // Removes the temporary unless Commit() succeeded.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Every write is checked; failures (ENOSPC, EFBIG, EIO) throw Error naming the path.
  void Write(const void* data, size_t n);
  void WriteZeros(size_t n);
  // Streams `nbytes` produced by `fill` in pieces that are whole multiples of `row_bytes`.
  void WriteFilled(size_t nbytes, size_t row_bytes, const ByteFill& fill);

  uint64_t bytes_written() const { return written_ + buffered_; }
  const std::string& path() const { return path_; }

  // Flushes, syncs, closes and renames into place.
  void Commit();
  // Closes and removes the temporary (also done by the destructor); idempotent.
  void Abort();

 private:
  void Flush();
  void WriteRaw(const void* data, size_t n);

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool temp_live_ = false;  // The temporary exists and is ours to remove.
  uint64_t written_ = 0;
  std::vector<std::byte> buffer_;
  size_t buffered_ = 0;
};

}  // namespace moex

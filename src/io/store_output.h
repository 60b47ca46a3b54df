// Where an expert store may be written, and how concurrent writers share it. A store path
// comes from the user (--store, --out), so it may name anything: packing must never replace
// a file that is not a store (a checkpoint, a config, a device node), and two processes
// packing the same store must not write one temporary file between them.
#pragma once

#include <string>

namespace moex {

// Checks that `path` may receive a store and returns the path to write: `path` itself, or
// the file a symlink in the same directory points to. Throws Error for a directory, a
// device or other non-regular file, a symlink out of its directory, or an existing file
// that does not start with the store's magic (nothing is modified).
std::string CheckStoreTarget(const std::string& path);

// A fresh temporary name beside `path` (PID and a counter: unique per process and call).
std::string UniqueTempPath(const std::string& path);

// An exclusive advisory lock (flock) on `path`.lock, held for the object's lifetime; a
// second process blocks in the constructor (saying so on stderr) until the first is done.
class StoreLock {
 public:
  explicit StoreLock(const std::string& store_path);
  ~StoreLock();
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace moex

// Where an expert store may be written, and how concurrent writers share it. A store path
// comes from the user (--store, --out), so it may name anything: packing must never replace
// a file that is not a store (a checkpoint, a config, a device node), and two processes
// packing the same store must not write one temporary file between them.
#pragma once

#include <cstdint>
#include <string>

namespace moex {

// Checks that `path` may receive a store and returns the path to write: `path` itself, or
// the file a symlink in the same directory points to. Throws Error for a directory, a
// device or other non-regular file, a symlink out of its directory, or an existing file
// that does not start with the store's magic (nothing is modified).
std::string CheckStoreTarget(const std::string& path);

// A fresh temporary name beside `path` (PID and a counter: unique per process and call).
std::string UniqueTempPath(const std::string& path);

// Free bytes for this user on the filesystem of `dir`. Throws Error, saying what needs how
// much and naming `path_option` (e.g. --store) as the way out, when fewer than `bytes` are
// free. Returns -1 when the filesystem cannot tell (not an error: the write reports a full
// disk then).
int64_t CheckRoomFor(const std::string& dir, uint64_t bytes, const std::string& what,
                     const std::string& path_option);

// An exclusive advisory lock (flock) on `path`.lock, held for the object's lifetime; a
// second process blocks in the constructor (saying so on stderr) until the first is done.
// The lock file exists only while held: the holder removes it before letting go, and a
// waiter that then finds its file gone locks the new one.
class StoreLock {
 public:
  explicit StoreLock(const std::string& store_path);
  ~StoreLock();
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  std::string lock_path_;
  int fd_ = -1;
};

}  // namespace moex

// Shared by the libFuzzer targets in fuzz/ (docs/fuzzing.md). Each target defines
// LLVMFuzzerTestOneInput; a bad input must end in moex::Error (or the parser's own
// documented error), anything else -- a crash, another exception, a sanitizer report, a
// view outside the input -- is a finding. The same entry points run over fuzz/corpus/ in
// ctest (replay_main.cc), built with the normal compiler.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

#include "core/error.h"

namespace moex::fuzz {

inline std::span<const std::byte> Bytes(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

// Fails loudly (libFuzzer records the input): an invariant of a successful parse is broken.
[[noreturn]] inline void Finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

inline void Expect(bool ok, const std::string& what) {
  if (!ok) Finding(what);
}

// Writes the input to this process's scratch file for the parsers that read paths; the
// same name every call, removed at exit.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& suffix) {
    const char* dir = std::getenv("TMPDIR");
    path_ = (std::filesystem::path(dir != nullptr && *dir != '\0' ? dir : "/tmp") /
             ("moex-fuzz-" + std::to_string(::getpid()) + suffix))
                .string();
  }
  ~ScratchFile() { std::remove(path_.c_str()); }

  const std::string& Write(const void* data, size_t size) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    Expect(out.good(), "cannot write the scratch file " + path_);
    return path_;
  }

 private:
  std::string path_;
};

// Runs `parse`; moex::Error is the expected answer to a bad input. MOEX_FUZZ_VERBOSE=1 prints
// it (to check that seeds are valid inputs).
template <typename Parse>
int ExpectOnlyMoexErrors(Parse parse) {
  try {
    parse();
  } catch (const Error& e) {
    static const bool verbose = std::getenv("MOEX_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "moex::Error: %s\n", e.what());
  }
  return 0;
}

}  // namespace moex::fuzz

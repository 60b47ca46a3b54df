// Access to ../shared/data (real tokenizers, corpora, prompts) for tests that use it.
#pragma once

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace moex::testing {

// The repository root this test binary was built from. Only shared_data.cc is compiled
// with the path, so the other test objects do not depend on where the checkout lives.
std::filesystem::path SourceDir();

// SourceDir()/../shared/data (real tokenizers, corpora, prompts: outside the repository).
// Tests that need it use MOEX_SKIP_WITHOUT_SHARED_DATA when it is absent.
std::filesystem::path SharedDataDir();

// True under CI (CI=true): a missing ../shared/data is then a failure, not a skip.
bool SharedDataRequired();
// Counts a skip for the summary printed at the end of the test program.
void CountSharedDataSkip(const std::string& what);

// The whole file as bytes; empty if it cannot be read.
std::string ReadFile(const std::filesystem::path& path);

// Copies only when the content differs, atomically, so parallel test processes reading
// `to` see the old or the new file, never half of one.
void CopyIfChanged(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace moex::testing

// Ends the current test because `what` (a path or a description) needs ../shared/data:
// under CI=true as a failure, elsewhere as a skip that the end-of-run summary counts.
#define MOEX_SKIP_WITHOUT_SHARED_DATA(what)                                                  \
  do {                                                                                       \
    if (::moex::testing::SharedDataRequired())                                               \
      FAIL() << "needs ../shared/data, which is missing under CI: " << (what);               \
    ::moex::testing::CountSharedDataSkip(::testing::PrintToString(what));                    \
    GTEST_SKIP() << "shared data not found: " << (what);                                     \
  } while (0)

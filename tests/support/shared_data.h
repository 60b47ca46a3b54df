// Access to ../shared/data (real tokenizers, corpora, prompts) for tests that use it.
#pragma once

#include <filesystem>
#include <string>

namespace moex::testing {

// The repository root this test binary was built from. Only shared_data.cc is compiled
// with the path, so the other test objects do not depend on where the checkout lives.
std::filesystem::path SourceDir();

// SourceDir()/../shared/data; tests GTEST_SKIP when it is absent.
std::filesystem::path SharedDataDir();

// The whole file as bytes; empty if it cannot be read.
std::string ReadFile(const std::filesystem::path& path);

// Copies only when the content differs, atomically, so parallel test processes reading
// `to` see the old or the new file, never half of one.
void CopyIfChanged(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace moex::testing

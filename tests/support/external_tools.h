// Tests that need a program outside the build (Node.js and the npm packages of
// tests/serve_clients, Chromium, promtool): where one is missing the test is skipped with
// the reason, except under CI (CI=true), where it fails, so CI never passes by skipping.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace moex::testing {

bool InCi();

// Empty when `program` is found on PATH, else why not.
std::string ProgramMissing(const std::string& program);

// tests/serve_clients, where the Node client tests and their node_modules live.
std::filesystem::path ServeClientsDir();

// Empty when node and every npm package in `packages` are installed under
// ServeClientsDir() (tests/serve_clients/install.sh installs them), else why not.
std::string ServeClientsMissing(const std::vector<std::string>& packages);

}  // namespace moex::testing

// Skips (fails under CI) the current test when `why` is not empty.
#define MOEX_REQUIRE_TOOL(why)                                                     \
  do {                                                                             \
    const std::string moex_missing_ = (why);                                       \
    if (!moex_missing_.empty()) {                                                  \
      if (::moex::testing::InCi()) FAIL() << moex_missing_ << " (required in CI)"; \
      GTEST_SKIP() << moex_missing_;                                               \
    }                                                                              \
  } while (0)

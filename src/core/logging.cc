#include "core/logging.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace moex {

namespace {

// MOEX_LOG=error|warn|info|debug sets the starting level (default warn).
int LevelFromEnvironment() {
  const char* env = std::getenv("MOEX_LOG");
  if (env == nullptr || *env == '\0') return static_cast<int>(LogLevel::kWarn);
  const char* names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; ++i)
    if (std::strcmp(env, names[i]) == 0) return i;
  std::cerr << "moex: ignoring MOEX_LOG=" << env << " (expected error, warn, info or debug)\n";
  return static_cast<int>(LogLevel::kWarn);
}

std::atomic<int> g_level{LevelFromEnvironment()};

}  // namespace

LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }
void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

}  // namespace moex

// Minimal logging to stderr, so stdout stays clean for JSON and generated text.
#pragma once

#include <iostream>
#include <sstream>

namespace moex {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel GetLogLevel();
void SetLogLevel(LogLevel level);

template <typename... Parts>
void Log(LogLevel level, Parts&&... parts) {
  if (level > GetLogLevel()) return;
  std::ostringstream out;
  out << "moex: ";
  (out << ... << parts);
  out << '\n';
  std::cerr << out.str();
}

}  // namespace moex

#include "cli/line_reader.h"

#include <editline/readline.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include "core/logging.h"

namespace moex::cli {

namespace {
constexpr int kHistoryLines = 1000;
}  // namespace

std::string DefaultChatHistoryPath() {
  namespace fs = std::filesystem;
  if (const char* state = std::getenv("XDG_STATE_HOME"); state != nullptr && *state == '/')
    return (fs::path(state) / "moex" / "chat_history").string();
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/')
    return (fs::path(home) / ".local" / "state" / "moex" / "chat_history").string();
  return "";
}

LineReader::LineReader(std::string history_path)
    : interactive_(isatty(STDIN_FILENO) != 0 && isatty(STDOUT_FILENO) != 0),
      history_path_(std::move(history_path)) {
  if (!interactive_) return;
  using_history();
  stifle_history(kHistoryLines);
  // A missing file is a first session; one that cannot be read starts an empty history.
  if (!history_path_.empty() && std::filesystem::exists(history_path_))
    read_history(history_path_.c_str());
}

std::optional<std::string> LineReader::Read(const std::string& prompt) {
  if (!interactive_) {
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    return line;
  }
  std::unique_ptr<char, decltype(&std::free)> raw(readline(prompt.c_str()), &std::free);
  if (!raw) return std::nullopt;
  std::string line(raw.get());
  if (line.empty() || history_path_.empty()) return line;
  add_history(line.c_str());
  // Saved after every line: a session that ends by a signal loses none of it.
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(history_path_).parent_path(), ec);
  if (write_history(history_path_.c_str()) != 0 && !history_warned_) {
    history_warned_ = true;
    Log(LogLevel::kWarn, "cannot save the chat history to ", history_path_,
        " (the session goes on without it)");
  }
  return line;
}

}  // namespace moex::cli

// The lines `moex chat` reads: at a terminal with line editing and a history kept between
// sessions (libedit's readline interface: arrow keys, Ctrl-R, ...), from a pipe or file as
// plain lines.
#pragma once

#include <optional>
#include <string>

namespace moex::cli {

class LineReader {
 public:
  // `history_path`: the file the history is read from and saved to at a terminal ("": none).
  explicit LineReader(std::string history_path);

  bool interactive() const { return interactive_; }
  // The next line without its newline; nullopt at the end of input (Ctrl-D).
  std::optional<std::string> Read(const std::string& prompt);

 private:
  bool interactive_;
  std::string history_path_;
  bool history_warned_ = false;
};

// $XDG_STATE_HOME/moex/chat_history, else ~/.local/state/moex/chat_history; "" without HOME.
std::string DefaultChatHistoryPath();

}  // namespace moex::cli

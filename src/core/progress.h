// Progress of a long operation on stderr (stdout stays clean for text and JSON): on a
// terminal one line rewritten in place, elsewhere (logs, pipes) a line per tenth of the
// work, so a long run is never silent and a log never fills with updates.
#pragma once

#include <cstdint>
#include <string>

namespace moex {

class Progress {
 public:
  // `only_on_terminal`: say nothing unless stderr is a terminal (for output that is
  // usually piped, such as --json generations).
  Progress(std::string what, int64_t total, bool only_on_terminal = false);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Update(int64_t done);

 private:
  std::string what_;
  int64_t total_;
  bool enabled_;
  bool tty_;
  int64_t last_tenth_ = -1;
  bool open_line_ = false;
};

}  // namespace moex

// Progress of a long operation on stderr (stdout stays clean for text and JSON): on a
// terminal one line rewritten in place, elsewhere (logs, pipes) a line per tenth of the
// work, so a long run is never silent and a log never fills with updates.
#pragma once

#include <cstdint>
#include <string>

namespace moex {

// The newest report of any long operation in this process, for whoever shows it elsewhere
// (the server's /health while the model loads). Thread-safe.
struct ProgressReport {
  std::string what;  // Empty before any report.
  int64_t done = 0;
  int64_t total = 0;
};
void PublishProgress(const std::string& what, int64_t done, int64_t total);
ProgressReport LatestProgress();

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

// OpenAI's `stop` sequences over streamed text: generation ends where any stop sequence
// first appears, and neither it nor anything after it is returned. Text that could be the
// start of a stop sequence is held back until it is known not to be one, so a streaming
// client never receives text that is later cut.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moex::serve {

// The length of the longest suffix of `text` that is a proper prefix of `marker`: what must
// be held back because the next text may complete the marker.
size_t PartialMarkerLength(std::string_view text, std::string_view marker);

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends generated text; returns what may be sent now. After a stop sequence is found,
  // stopped() is true and later text is dropped.
  std::string Push(const std::string& text);
  // The held-back text, at the end of generation.
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace moex::serve

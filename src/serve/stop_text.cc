#include "serve/stop_text.h"

#include <algorithm>

namespace moex::serve {

size_t PartialMarkerLength(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(marker.empty() ? 0 : marker.size() - 1, text.size()); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

std::string StopText::Push(const std::string& text) {
  if (stopped_) return "";
  held_ += text;
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold the longest suffix that is a proper prefix of some stop sequence.
  size_t keep = 0;
  for (const std::string& stop : stops_) keep = std::max(keep, PartialMarkerLength(held_, stop));
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopText::Flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace moex::serve

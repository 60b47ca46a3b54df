#include "text/tokenizer_stream.h"

#include "text/tokenizer_utf8.h"

namespace moex {

std::string StreamDecoder::Push(int32_t id) {
  if (id < 0 || id >= tokenizer_.vocab_size()) return "";
  if (skip_special_ && tokenizer_.IsSpecial(id)) return "";
  std::string_view bytes = tokenizer_.TokenBytes(id);
  if (!started_ && !bytes.empty()) {
    started_ = true;
    if (tokenizer_.strips_leading_space() && bytes[0] == ' ') bytes.remove_prefix(1);
  }
  pending_.append(bytes);
  const size_t complete = Utf8CompletePrefix(pending_);
  if (complete == 0) return "";
  std::string out = pending_.substr(0, complete);
  pending_.erase(0, complete);
  if (!IsValidUtf8(out)) out = SanitizeUtf8(out);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out = SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

void StreamDecoder::Reset() {
  pending_.clear();
  started_ = false;
}

}  // namespace moex

// OpenAI's `logprobs` objects, built from the scheduler's TokenLogprobs: chat's
// {"content": [{token, logprob, bytes, top_logprobs}]} and completions' {tokens,
// token_logprobs, top_logprobs, text_offset}. A token is shown as its text when its bytes are
// valid UTF-8, else as "bytes:\xNN..." (OpenAI's form); without a tokenizer as "token_id:N".
#pragma once

#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/logprobs.h"
#include "text/tokenizer.h"

namespace moex::serve {

class LogprobsJson {
 public:
  // `tokenizer` may be null (token ids only).
  LogprobsJson(const Tokenizer* tokenizer, bool chat) : tokenizer_(tokenizer), chat_(chat) {}

  // The `logprobs` value of a choice (or of a stream chunk's choice) holding `entries`.
  // Completions' text_offset runs on across calls, so one object per choice is kept for a
  // stream.
  nlohmann::json Next(const std::vector<TokenLogprobs>& entries);

 private:
  struct Piece {
    std::string text;
    std::vector<int> bytes;
  };
  Piece PieceOf(int32_t token) const;

  const Tokenizer* tokenizer_;
  bool chat_;
  size_t text_offset_ = 0;
};

}  // namespace moex::serve

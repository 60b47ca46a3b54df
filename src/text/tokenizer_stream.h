// Streaming detokenization: one token id in, only complete UTF-8 out. A byte-level or
// byte-fallback token can end in the middle of a character; those bytes are held until the
// character completes, so the CLI and the server never print a broken character.
#pragma once

#include <cstdint>
#include <string>

#include "text/tokenizer.h"

namespace moex {

class StreamDecoder {
 public:
  // The tokenizer must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Text completed by this token; often empty while a character is unfinished. The
  // concatenation of all results and Flush() equals Tokenizer::Decode of the same ids.
  std::string Push(int32_t id);
  // Everything still held, with U+FFFD for a sequence that never completed.
  std::string Flush();
  // Forgets held bytes, for a new sequence.
  void Reset();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool started_ = false;  // some text has been produced (the leading-space rule is spent)
  std::string pending_;
};

}  // namespace moex

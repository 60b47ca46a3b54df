#include "serve/logprobs_json.h"

#include <cstdio>

#include "text/tokenizer_utf8.h"

namespace moex::serve {

using nlohmann::json;

LogprobsJson::Piece LogprobsJson::PieceOf(int32_t token) const {
  Piece p;
  if (!tokenizer_) {
    p.text = "token_id:" + std::to_string(token);
    return p;
  }
  const std::string& bytes = tokenizer_->TokenBytes(token);
  for (unsigned char c : bytes) p.bytes.push_back(c);
  if (IsValidUtf8(bytes)) {
    p.text = bytes;
  } else {
    p.text = "bytes:";
    for (unsigned char c : bytes) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      p.text += hex;
    }
  }
  return p;
}

json LogprobsJson::Next(const std::vector<TokenLogprobs>& entries) {
  auto bytes_or_null = [&](const Piece& p) { return tokenizer_ ? json(p.bytes) : json(nullptr); };
  if (chat_) {
    json content = json::array();
    for (const TokenLogprobs& e : entries) {
      const Piece p = PieceOf(e.token);
      json top = json::array();
      for (const auto& [id, logprob] : e.top) {
        const Piece t = PieceOf(id);
        top.push_back({{"token", t.text}, {"logprob", logprob}, {"bytes", bytes_or_null(t)}});
      }
      content.push_back({{"token", p.text},
                         {"logprob", e.logprob},
                         {"bytes", bytes_or_null(p)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const TokenLogprobs& e : entries) {
    const Piece p = PieceOf(e.token);
    tokens.push_back(p.text);
    logprobs.push_back(e.logprob);
    json alternatives = json::object();
    for (const auto& [id, logprob] : e.top) alternatives[PieceOf(id).text] = logprob;
    top.push_back(std::move(alternatives));
    offsets.push_back(text_offset_);
    text_offset_ += tokenizer_ ? tokenizer_->TokenBytes(e.token).size() : 0;
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

}  // namespace moex::serve

// Anthropic's Messages API (POST /v1/messages) on the chat scheduler: a request is translated
// into the OpenAI chat body ParseApiRequest checks, and the reply is rendered as a message
// object or as Anthropic's stream events. Translation is a pure function of the body (fuzzed
// with the OpenAI parser); what Anthropic sends that moex cannot honour (images, documents,
// server tools) is a 400 naming the field, and fields moex does not know are ignored and
// listed, as on the OpenAI endpoints. Choices: docs/serving.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/tool_calls.h"

namespace moex::serve {

struct DialectRequest {
  std::string chat_body;             // An OpenAI chat completions body.
  std::vector<std::string> ignored;  // Fields moex does not know, for the Warning header.
  std::string model;                 // As sent (echoed in the reply).
  nlohmann::json echo = nlohmann::json::object();  // Request fields the reply repeats.
};

// Throws ApiError (400) naming the Anthropic field that is malformed or unsupported.
DialectRequest TranslateMessagesRequest(std::string_view body);

// Anthropic's error body: {"type": "error", "error": {"type", "message"}}.
nlohmann::json MessagesErrorBody(int status, const std::string& message);

struct DialectUsage {
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cached_tokens = 0;
};

// The whole reply as a message object. finish_reason is the scheduler's (stop, length);
// calls make it tool_use.
nlohmann::json MessagesResponse(const std::string& id, const std::string& model,
                                const ParsedReply& reply, const std::string& finish_reason,
                                const DialectUsage& usage, ToolCallFormat format);

// Anthropic's stream events for one reply, as "event: NAME\ndata: JSON\n\n" text: Start
// before any token, Text for each piece of visible text (a text block is opened on the
// first), Finish with the held-back rest (content, then each call as a tool_use block).
class MessagesStream {
 public:
  MessagesStream(std::string id, std::string model, ToolCallFormat format)
      : id_(std::move(id)), model_(std::move(model)), format_(format) {}
  std::string Start(int64_t input_tokens);
  std::string Text(const std::string& text);
  std::string Finish(const ParsedReply& rest, const std::string& finish_reason,
                     const DialectUsage& usage);
  // An error mid-stream (Anthropic's "error" event).
  static std::string Error(int status, const std::string& message);

 private:
  std::string CloseText();
  std::string id_, model_;
  ToolCallFormat format_;
  int block_ = 0;           // The next content block's index.
  bool text_open_ = false;  // A text block was started and not yet stopped.
};

}  // namespace moex::serve

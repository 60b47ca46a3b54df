// OpenAI's Responses API (POST /v1/responses) on the chat scheduler: input items,
// instructions, function tools and text.format are translated into the chat body
// ParseApiRequest checks; the reply is rendered as a response object with output items
// (a message, function calls) or as the API's stream of typed events. moex keeps no
// responses, so previous_response_id and stored items are a 400 saying to send the whole
// conversation; images, files and hosted tools are a 400 naming the field. Choices:
// docs/serving.md.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "serve/messages_api.h"
#include "serve/tool_calls.h"

namespace moex::serve {

// Throws ApiError (400) naming the field that is malformed or unsupported.
DialectRequest TranslateResponsesRequest(std::string_view body);

// The response object of one reply; `base` holds id, created_at, model and the echoed request
// fields (ResponsesBase).
nlohmann::json ResponsesBase(const std::string& id, int64_t created_at, const std::string& model,
                             const DialectRequest& request);
nlohmann::json ResponsesResponse(nlohmann::json base, const ParsedReply& reply,
                                 const std::string& finish_reason, const DialectUsage& usage,
                                 ToolCallFormat format);

// The Responses stream events of one reply ("event: TYPE\ndata: JSON\n\n"), numbered.
class ResponsesStream {
 public:
  ResponsesStream(nlohmann::json base, ToolCallFormat format)
      : base_(std::move(base)), format_(format) {}
  std::string Start();
  std::string Text(const std::string& text);
  std::string Finish(const ParsedReply& rest, const std::string& finish_reason,
                     const DialectUsage& usage);
  std::string Error(int status, const std::string& message);

 private:
  std::string Event(nlohmann::json data);
  std::string OpenMessage();
  std::string CloseMessage();
  nlohmann::json base_;
  ToolCallFormat format_;
  int64_t sequence_ = 0;
  nlohmann::json output_ = nlohmann::json::array();  // Finished items.
  std::string message_id_;  // The open message item ("" when none is open).
  std::string text_;        // Its text so far.
};

}  // namespace moex::serve

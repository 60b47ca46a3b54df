// libFuzzer target: the HTTP API's request parser. The first byte picks the endpoint
// (completions, chat, Anthropic's messages or the Responses API, which are translated into a
// chat body first), the rest is the body. A bad body must be refused with ApiError 400,
// nothing else.
#include "fuzz/fuzz_support.h"
#include "serve/api_error.h"
#include "serve/api_request.h"
#include "serve/messages_api.h"
#include "serve/responses_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moex;
  if (size == 0) return 0;
  const int which = data[0] % 4;
  const serve::Endpoint endpoint =
      which == 0 ? serve::Endpoint::kCompletion : serve::Endpoint::kChat;
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  serve::ApiLimits limits;
  limits.vocab_size = 50304;
  try {
    if (which == 2) body = serve::TranslateMessagesRequest(body).chat_body;
    if (which == 3) body = serve::TranslateResponsesRequest(body).chat_body;
    const serve::ApiRequest r = serve::ParseApiRequest(endpoint, body, limits);
    fuzz::Expect(r.max_tokens >= 0, "negative max_tokens accepted");
    fuzz::Expect(r.stop.size() <= limits.max_stop, "too many stop sequences accepted");
    for (int32_t id : r.prompt_ids)
      fuzz::Expect(id >= 0 && id < limits.vocab_size, "prompt id out of range accepted");
    fuzz::Expect(!r.tools.empty() || r.tool_choice == "none",
                 "a tool_choice without tools accepted");
    fuzz::Expect(r.n >= 1 && r.n <= limits.max_choices, "n out of range accepted");
  } catch (const serve::ApiError& e) {
    fuzz::Expect(e.status() == 400, "status " + std::to_string(e.status()) + " for a bad body");
  }
  return 0;
}

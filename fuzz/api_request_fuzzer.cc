// libFuzzer target: the HTTP API's request parser. The first byte picks the endpoint, the
// rest is the body. A bad body must be refused with ApiError 400, nothing else.
#include "fuzz/fuzz_support.h"
#include "serve/api_error.h"
#include "serve/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moex;
  if (size == 0) return 0;
  const serve::Endpoint endpoint =
      data[0] % 2 ? serve::Endpoint::kChat : serve::Endpoint::kCompletion;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  serve::ApiLimits limits;
  limits.vocab_size = 50304;
  try {
    const serve::ApiRequest r = serve::ParseApiRequest(endpoint, body, limits);
    fuzz::Expect(r.max_tokens >= 0, "negative max_tokens accepted");
    fuzz::Expect(r.stop.size() <= limits.max_stop, "too many stop sequences accepted");
    for (int32_t id : r.prompt_ids)
      fuzz::Expect(id >= 0 && id < limits.vocab_size, "prompt id out of range accepted");
    fuzz::Expect(!r.tools.empty() || r.tool_choice == "none", "a tool_choice without tools accepted");
    fuzz::Expect(r.n >= 1 && r.n <= limits.max_choices, "n out of range accepted");
  } catch (const serve::ApiError& e) {
    fuzz::Expect(e.status() == 400, "status " + std::to_string(e.status()) + " for a bad body");
  }
  return 0;
}

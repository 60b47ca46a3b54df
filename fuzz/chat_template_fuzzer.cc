// libFuzzer target: a chat template (the Jinja subset of text/chat_template.h). A template
// that parses is rendered as `moex chat` and the server render them: over a conversation with
// every role, over alternating user/assistant turns (templates that refuse a system role),
// over none, once cancelled part way, and once with tools and a tool call. Each render may
// fail on its own.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moex;
  std::optional<ChatTemplate> tmpl;
  fuzz::ExpectOnlyMoexErrors(
      [&] { tmpl.emplace(std::string(reinterpret_cast<const char*>(data), size), "<s>", "</s>"); });
  if (!tmpl) return 0;
  fuzz::ExpectOnlyMoexErrors([&] {
    (void)ApplyChatTemplate(*tmpl,
                            {{"system", "Be brief."},
                             {"user", "Hi {{ there }}"},
                             {"assistant", "Hello."},
                             {"user", "2+2?"}},
                            true);
  });
  fuzz::ExpectOnlyMoexErrors([&] {
    (void)ApplyChatTemplate(*tmpl, {{"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}},
                            false);
  });
  fuzz::ExpectOnlyMoexErrors([&] { (void)ApplyChatTemplate(*tmpl, {}, true); });
  // Cancelled at its second check, as the server cancels a render at a timeout or shutdown.
  int checks = 0;
  fuzz::ExpectOnlyMoexErrors([&] {
    (void)ApplyChatTemplate(*tmpl, {{"user", "Hi"}}, true, [&] { return ++checks >= 2; });
  });
  fuzz::ExpectOnlyMoexErrors([&] {
    const nlohmann::json messages = nlohmann::json::parse(R"([
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": "",
       "tool_calls": [{"type": "function", "function": {"name": "get", "arguments": {"x": 1}}}]},
      {"role": "tool", "content": "sunny"}])");
    const nlohmann::json extra = nlohmann::json::parse(
        R"({"tools": [{"type": "function", "function": {"name": "get", "parameters": {}}}],
            "enable_thinking": false})");
    (void)ApplyChatTemplateJson(*tmpl, messages, true, extra);
  });
  return 0;
}

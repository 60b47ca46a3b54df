// libFuzzer target: the tool-call parsers of every format (serve/tool_calls.h). The input is
// a model's reply. Each format parses it whole, and streamed in pieces cut at every 7th byte;
// invariants: parsing never throws, every call has a name and arguments that are a JSON
// object's text, the streamed calls equal the whole parse's, and the streamed content is
// the whole content once trimmed.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "serve/tool_calls.h"

namespace {

using namespace moex;
using namespace moex::serve;

std::string Trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"s": {"type": "string"}, "n": {"type": "integer"}}}}}])");
  for (ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kMistral, ToolCallFormat::kDeepSeekV3,
        ToolCallFormat::kDeepSeekV31, ToolCallFormat::kGlm, ToolCallFormat::kMiniMax,
        ToolCallFormat::kHarmony}) {
    const ParsedReply whole = ParseToolCalls(format, text, tools);
    for (const ToolCall& c : whole.calls) {
      fuzz::Expect(!c.name.empty(), "a call without a name");
      const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
      fuzz::Expect(args.is_object() || format == ToolCallFormat::kHermes ||
                       format == ToolCallFormat::kMistral,
                   "arguments that are not an object: " + c.arguments);
    }
    ToolCallStream stream(format, tools);
    std::string content;
    for (size_t at = 0; at < text.size(); at += 7) content += stream.Push(text.substr(at, 7));
    const ParsedReply rest = stream.Finish();
    content += rest.content;
    fuzz::Expect(rest.calls.size() == whole.calls.size(), "streamed calls differ in number");
    for (size_t i = 0; i < rest.calls.size(); ++i)
      fuzz::Expect(rest.calls[i].name == whole.calls[i].name &&
                       rest.calls[i].arguments == whole.calls[i].arguments,
                   "a streamed call differs");
    fuzz::Expect(Trimmed(content) == whole.content,
                 "streamed content differs: '" + content + "' vs '" + whole.content + "'");
  }
  return 0;
}

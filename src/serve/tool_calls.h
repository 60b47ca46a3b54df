// Tool calling (OpenAI's `tools`): which text format a chat template asks the model to write
// its calls in, parsing a reply into content and calls, the grammar that forces a call
// (`tool_choice` "required" or a named function), and the streaming split of a reply into
// content to send now and a call to send when it is whole.
//
// Formats: Hermes / Qwen (`<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`,
// one block per call), which Qwen2.5, Qwen3, Qwen3-MoE and Hermes templates use; Mistral
// (`[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, Mixtral-8x22B and Mistral v0.3
// templates, whose call ids are 9 letters and digits). Templates of other formats (DeepSeek's
// markers, GLM's, gpt-oss's harmony channels) are refused with a clear 400 until their
// parsers exist (docs/serving.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/grammar.h"

namespace moex::serve {

enum class ToolCallFormat { kNone, kHermes, kMistral };

// The format a chat template renders tool calls in; kNone when it renders none.
ToolCallFormat DetectToolCallFormat(const std::string& template_source);

struct ToolCall {
  std::string id;         // "call_..." (assigned by the server for a model's call).
  std::string name;
  std::string arguments;  // A JSON text, as OpenAI sends it.
};

// A new call id in the form the format's templates accept ("call_" and 24 letters and digits;
// Mistral's: 9 letters and digits).
std::string NewToolCallId(ToolCallFormat format);

struct ParsedReply {
  std::string content;          // The text outside the calls, trimmed.
  std::vector<ToolCall> calls;  // In order; a block whose JSON does not parse stays content.
};

ParsedReply ParseToolCalls(ToolCallFormat format, const std::string& text);

// A grammar of one call to `name` (or to any of `tools` when name is empty), its arguments
// valid against the function's `parameters` schema (any object when it has none); `compact`:
// the call's JSON has no optional whitespace (JsonSchemaOptions::compact).
std::shared_ptr<const Grammar> ToolCallGrammar(ToolCallFormat format,
                                               const nlohmann::ordered_json& tools,
                                               const std::string& name, bool compact = false);

// Splits a streamed reply: text before a call's opening marker is content to send at once
// (a suffix that may begin the marker is held back), everything from the marker on is kept
// for Finish.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat format) : format_(format) {}
  // New reply text in; the content that can be sent now out.
  std::string Push(const std::string& text);
  // The rest: content not yet sent, and the calls.
  ParsedReply Finish();

 private:
  ToolCallFormat format_;
  std::string held_;       // Not yet sent: a possible marker start, or everything after it.
  bool in_call_ = false;   // The marker was seen.
};

}  // namespace moex::serve

// Tool calling (OpenAI's `tools`): which text format a chat template asks the model to write
// its calls in, parsing a reply into content and calls, the grammar that forces a call
// (`tool_choice` "required" or a named function), and the streaming split of a reply into
// content to send now and a call to send when it is whole.
//
// Formats (docs/serving.md, "Tool calling"), each as its templates write an assistant's calls:
// - Hermes / Qwen: `<tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>`, one block
//   per call (Qwen2.5, Qwen3, Qwen3-MoE, Hermes).
// - Mistral: `[TOOL_CALLS][{"name": N, "arguments": {...}}, ...]` (Mixtral-8x22B, Mistral
//   v0.3; call ids of 9 letters and digits).
// - DeepSeek V3 / R1: `<｜tool▁calls▁begin｜>`, then per call `<｜tool▁call▁begin｜>function
//   <｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>`, then `<｜tool▁calls▁end｜>`.
// - DeepSeek V3.1: the same markers, a call being `<｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}
//   <｜tool▁call▁end｜>`.
// - GLM-4.5 / 4.6 / 4.7: `<tool_call>N`, then per argument `<arg_key>K</arg_key><arg_value>V
//   </arg_value>` (a string value raw, any other as JSON; a newline may precede each tag),
//   then `</tool_call>`.
// - MiniMax-M2 / M2.1: `<minimax:tool_call>`, then per call `<invoke name="N">` with one
//   `<parameter name="K">V</parameter>` per argument (typed as GLM's), then `</invoke>`, then
//   `</minimax:tool_call>`.
// - Harmony (gpt-oss): a reply is messages, each a header (`<|channel|>C`, a recipient
//   ` to=functions.N`, `<|constrain|>json`) and a body after `<|message|>` that ends at
//   `<|end|>`, `<|call|>`, `<|return|>` or the next `<|start|>`. A body sent to a function is a
//   call; the `final` channel (and commentary to no one) is content; `analysis` is reasoning,
//   left out. Every chat reply of such a template is parsed, tools or not; its text keeps the
//   special tokens (Job::special_text).
// DeepSeek's V3.2 markup (DSML) is not parsed: its templates are refused with a clear 400
// (docs/serving.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/grammar.h"

namespace moex::serve {

enum class ToolCallFormat {
  kNone,
  kHermes,
  kMistral,
  kDeepSeekV3,
  kDeepSeekV31,
  kGlm,
  kMiniMax,
  kHarmony
};

// The format a chat template renders an assistant's tool calls in (from its markers); kNone
// when it renders none that moex parses.
ToolCallFormat DetectToolCallFormat(const std::string& template_source);

// Whether a template renders the request's `tools` itself. DeepSeek's V3 and V3.1 templates
// render calls but not the tool list: the server then writes the list into the system prompt
// (ToolInstructions).
bool TemplateRendersTools(const std::string& template_source);

// A system-prompt text that lists `tools` (their `function` objects as JSON, one per line) and
// shows how to write a call in `format`.
std::string ToolInstructions(ToolCallFormat format, const nlohmann::ordered_json& tools);

// Whether the format's templates take a call's arguments as the JSON text (DeepSeek V3
// concatenates it) rather than as an object (HF's `arguments | tojson`, GLM's items()).
bool ArgumentsAsText(ToolCallFormat format);

struct ToolCall {
  std::string id;         // "call_..." (assigned by the server for a model's call).
  std::string name;
  std::string arguments;  // A JSON text, as OpenAI sends it.
};

// One call as the format writes it (the grammar's and the templates' form; `arguments` must be
// a JSON object's text), for tests and ToolInstructions.
std::string WriteToolCall(ToolCallFormat format, const ToolCall& call);

// A new call id in the form the format's templates accept ("call_" and 24 letters and digits;
// Mistral's: 9 letters and digits).
std::string NewToolCallId(ToolCallFormat format);

struct ParsedReply {
  std::string content;          // The text outside the calls, trimmed.
  std::vector<ToolCall> calls;  // In order; a block whose JSON does not parse stays content.
};

// `tools` (the request's, may be empty) gives GLM's argument types: a value of a string-typed
// parameter stays a string; any other is read as JSON when it parses. Harmony keeps calls only
// when `tools` offers some (a reply to a request without tools is content only).
ParsedReply ParseToolCalls(ToolCallFormat format, const std::string& text,
                           const nlohmann::ordered_json& tools = {});

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
  explicit ToolCallStream(ToolCallFormat format, nlohmann::ordered_json tools = {})
      : format_(format), tools_(std::move(tools)) {}
  // New reply text in; the content that can be sent now out.
  std::string Push(const std::string& text);
  // The rest: content not yet sent, and the calls.
  ParsedReply Finish();

 private:
  ToolCallFormat format_;
  nlohmann::ordered_json tools_;
  size_t sent_ = 0;        // Harmony: bytes of the content sent so far.
  std::string held_;       // Not yet sent: a possible marker start, or everything after it.
  bool in_call_ = false;   // The marker was seen.
};

}  // namespace moex::serve

#include "serve/tool_calls.h"

#include <random>

#include "core/error.h"
#include "serve/stop_text.h"

namespace moex::serve {

namespace {

constexpr const char* kHermesOpen = "<tool_call>";
constexpr const char* kHermesClose = "</tool_call>";
constexpr const char* kMistralOpen = "[TOOL_CALLS]";

// The marker a reply's calls begin with.
std::string OpenMarker(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return kHermesOpen;
    case ToolCallFormat::kMistral:
      return kMistralOpen;
    case ToolCallFormat::kNone:
      break;
  }
  return "";
}

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// One call object ({"name", "arguments"}) as a ToolCall; false when it is not one.
bool ReadCall(const nlohmann::json& call, ToolCall* out) {
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return false;
  const nlohmann::json args = call.value("arguments", nlohmann::json::object());
  if (!args.is_object() && !args.is_string()) return false;
  out->name = call["name"].get<std::string>();
  out->arguments = args.is_string() ? args.get<std::string>() : args.dump();
  return true;
}

ParsedReply ParseHermes(const std::string& text) {
  ParsedReply out;
  const std::string open = kHermesOpen, close_marker = kHermesClose;
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open_at = text.find(open, at);
    if (open_at == std::string::npos) break;
    const size_t body = open_at + open.size();
    const size_t close = text.find(close_marker, body);
    // An unclosed last block (the reply hit max_tokens) is parsed to the end.
    const size_t end = close == std::string::npos ? text.size() : close;
    const size_t next = close == std::string::npos ? text.size() : close + close_marker.size();
    ToolCall c;
    if (ReadCall(nlohmann::json::parse(text.substr(body, end - body), nullptr, false), &c)) {
      content += text.substr(at, open_at - at);
      out.calls.push_back(std::move(c));
    } else {
      content += text.substr(at, next - at);  // Not a call: it stays text.
    }
    at = next;
  }
  content += text.substr(std::min(at, text.size()));
  out.content = Trim(content);
  return out;
}

// Text before [TOOL_CALLS] is content; after it, a JSON array of calls (anything after the
// array's end is dropped, as Mistral's own parser does).
ParsedReply ParseMistral(const std::string& text) {
  ParsedReply out;
  const size_t open = text.find(kMistralOpen);
  if (open == std::string::npos) {
    out.content = Trim(text);
    return out;
  }
  const std::string rest = text.substr(open + std::string(kMistralOpen).size());
  for (size_t end = rest.rfind(']'); end != std::string::npos;
       end = end == 0 ? std::string::npos : rest.rfind(']', end - 1)) {
    const nlohmann::json calls = nlohmann::json::parse(rest.substr(0, end + 1), nullptr, false);
    if (!calls.is_array()) continue;
    std::vector<ToolCall> parsed;
    for (const auto& call : calls) {
      ToolCall c;
      if (!ReadCall(call, &c)) break;
      parsed.push_back(std::move(c));
    }
    if (parsed.size() != calls.size() || parsed.empty()) break;
    out.content = Trim(text.substr(0, open));
    out.calls = std::move(parsed);
    return out;
  }
  out.content = Trim(text);  // No parsable call list: all of it stays text.
  return out;
}

}  // namespace

ToolCallFormat DetectToolCallFormat(const std::string& source) {
  if (source.find("tools") == std::string::npos) return ToolCallFormat::kNone;
  if (source.find(kMistralOpen) != std::string::npos) return ToolCallFormat::kMistral;
  if (source.find(kHermesOpen) != std::string::npos) return ToolCallFormat::kHermes;
  return ToolCallFormat::kNone;
}

std::string NewToolCallId(ToolCallFormat format) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = format == ToolCallFormat::kMistral ? "" : "call_";
  const int n = format == ToolCallFormat::kMistral ? 9 : 24;
  for (int i = 0; i < n; ++i) id += kChars[rng() % (sizeof kChars - 1)];
  return id;
}

ParsedReply ParseToolCalls(ToolCallFormat format, const std::string& text) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text);
    case ToolCallFormat::kMistral:
      return ParseMistral(text);
    case ToolCallFormat::kNone:
      break;
  }
  ParsedReply out;
  out.content = text;
  return out;
}

std::shared_ptr<const Grammar> ToolCallGrammar(ToolCallFormat format,
                                               const nlohmann::ordered_json& tools,
                                               const std::string& name, bool compact) {
  Check(format != ToolCallFormat::kNone, "no tool-call grammar without a format");
  nlohmann::ordered_json choices = nlohmann::ordered_json::array();
  for (const auto& tool : tools) {
    const auto& f = tool["function"];
    if (!name.empty() && f["name"] != name) continue;
    nlohmann::ordered_json parameters = f.contains("parameters") && !f["parameters"].is_null()
                                            ? f["parameters"]
                                            : nlohmann::ordered_json{{"type", "object"}};
    nlohmann::ordered_json call = {
        {"type", "object"},
        {"properties", {{"name", {{"const", f["name"]}}}, {"arguments", std::move(parameters)}}},
        {"required", {"name", "arguments"}},
        {"additionalProperties", false}};
    choices.push_back(std::move(call));
  }
  Check(!choices.empty(), "no tool named '", name, "'");
  const nlohmann::ordered_json schema =
      choices.size() == 1 ? choices[0] : nlohmann::ordered_json{{"anyOf", choices}};
  JsonSchemaOptions options;
  options.strict = false;  // A function's optional parameters stay optional.
  options.additional_properties_default = false;
  options.compact = compact;
  // One call, written as the format writes it.
  options.prefix = format == ToolCallFormat::kHermes ? std::string(kHermesOpen) + "\n"
                                                      : std::string(kMistralOpen) + "[";
  options.suffix = format == ToolCallFormat::kHermes ? std::string("\n") + kHermesClose : "]";
  return std::make_shared<const Grammar>(JsonSchemaGrammar(schema, options));
}

std::string ToolCallStream::Push(const std::string& text) {
  held_ += text;
  const std::string open = OpenMarker(format_);
  if (in_call_ || open.empty()) return in_call_ ? "" : std::exchange(held_, "");
  const size_t at = held_.find(open);
  if (at != std::string::npos) {
    in_call_ = true;
    std::string ready = held_.substr(0, at);
    held_.erase(0, at);
    return ready;
  }
  const size_t keep = PartialMarkerLength(held_, open);  // It may begin the marker.
  std::string ready = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return ready;
}

ParsedReply ToolCallStream::Finish() {
  ParsedReply out = ParseToolCalls(format_, held_);
  held_.clear();
  return out;
}

}  // namespace moex::serve

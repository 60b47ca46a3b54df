#include "serve/tool_calls.h"

#include "core/error.h"
#include "serve/stop_text.h"

namespace moex::serve {

namespace {

constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

}  // namespace

ToolCallFormat DetectToolCallFormat(const std::string& source) {
  if (source.find("tools") == std::string::npos) return ToolCallFormat::kNone;
  if (source.find(kOpen) != std::string::npos) return ToolCallFormat::kHermes;
  return ToolCallFormat::kNone;
}

ParsedReply ParseToolCalls(ToolCallFormat format, const std::string& text) {
  ParsedReply out;
  if (format != ToolCallFormat::kHermes) {
    out.content = text;
    return out;
  }
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kOpen, at);
    if (open == std::string::npos) break;
    const size_t body = open + std::string(kOpen).size();
    const size_t close = text.find(kClose, body);
    // An unclosed last block (the reply hit max_tokens) is parsed to the end.
    const size_t end = close == std::string::npos ? text.size() : close;
    const nlohmann::json call = nlohmann::json::parse(text.substr(body, end - body), nullptr, false);
    const bool valid = call.is_object() && call.contains("name") && call["name"].is_string() &&
                       (!call.contains("arguments") || call["arguments"].is_object() ||
                        call["arguments"].is_string());
    const size_t next = close == std::string::npos ? text.size() : close + std::string(kClose).size();
    if (!valid) {
      content += text.substr(at, next - at);
    } else {
      content += text.substr(at, open - at);
      ToolCall c;
      c.name = call["name"].get<std::string>();
      const nlohmann::json args = call.value("arguments", nlohmann::json::object());
      c.arguments = args.is_string() ? args.get<std::string>() : args.dump();
      out.calls.push_back(std::move(c));
    }
    at = next;
  }
  content += text.substr(std::min(at, text.size()));
  out.content = Trim(content);
  return out;
}

std::shared_ptr<const Grammar> ToolCallGrammar(ToolCallFormat format,
                                               const nlohmann::ordered_json& tools,
                                               const std::string& name) {
  Check(format == ToolCallFormat::kHermes, "no tool-call grammar for this format");
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
  options.prefix = std::string(kOpen) + "\n";
  options.suffix = std::string("\n") + kClose;
  return std::make_shared<const Grammar>(JsonSchemaGrammar(schema, options));
}

std::string ToolCallStream::Push(const std::string& text) {
  held_ += text;
  if (in_call_ || format_ != ToolCallFormat::kHermes) return in_call_ ? "" : std::exchange(held_, "");
  const std::string open = kOpen;
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

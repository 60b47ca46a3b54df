#include "serve/messages_api.h"

#include <set>

#include "serve/api_error.h"
#include "serve/dialect_json.h"

namespace moex::serve {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// A text field given as a string or as an array of text blocks ({"type": "text", "text"}).
std::string TextOf(const ordered_json& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) BadField(param, "must be a string or an array of text blocks");
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = param + "." + std::to_string(i);
    const ordered_json& block = v[i];
    if (!block.is_object() || StringField(block, "type", "") != "text" || !block.contains("text") ||
        !block["text"].is_string())
      BadField(at, "must be a text block {\"type\": \"text\", \"text\": ...}" +
                       std::string(block.is_object() && StringField(block, "type", "") != "text"
                                       ? " (moex serves text-only models: no '" +
                                             StringField(block, "type", "?") + "' blocks)"
                                       : ""));
    text += (text.empty() ? "" : "\n") + block["text"].get<std::string>();
  }
  return text;
}

// One Anthropic message as OpenAI chat messages (a user turn's tool results become tool
// messages, before its text).
void AddMessage(const ordered_json& m, const std::string& at, ordered_json& out) {
  if (!m.is_object()) BadField(at, "must be an object with 'role' and 'content'");
  const std::string role = StringField(m, "role", "");
  if (role != "user" && role != "assistant")
    BadField(at + ".role",
             "must be user or assistant (the system prompt is the top-level 'system')");
  if (!m.contains("content")) BadField(at + ".content", "is required");
  const ordered_json& content = m["content"];
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content.get<std::string>()}});
    return;
  }
  if (!content.is_array())
    BadField(at + ".content", "must be a string or an array of content blocks");
  std::string text;
  ordered_json calls = ordered_json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string bat = at + ".content." + std::to_string(j);
    const ordered_json& b = content[j];
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      BadField(bat, "must be a content block with a 'type'");
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string())
        BadField(bat + ".text", "must be a string");
      text += b["text"].get<std::string>();
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string()) BadField(bat + ".id", "must be a string");
      if (!b.contains("name") || !b["name"].is_string())
        BadField(bat + ".name", "must be a string");
      const ordered_json input = b.contains("input") ? b["input"] : ordered_json::object();
      if (!input.is_object()) BadField(bat + ".input", "must be an object");
      calls.push_back({{"id", b["id"]},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        BadField(bat + ".tool_use_id", "must be a string");
      std::string result = b.contains("content") && !b["content"].is_null()
                               ? TextOf(b["content"], bat + ".content")
                               : "";
      if (BoolField(b, "is_error", false)) result = "Error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else if (type == "thinking" || type == "redacted_thinking") {
      // A reasoning model's earlier thoughts, which clients send back: not part of the prompt.
    } else {
      BadField(bat + ".type", "'" + type + "' blocks are not supported in " + role +
                                  " messages (moex serves text-only models; text, tool_use and "
                                  "tool_result blocks are)");
    }
  }
  if (role == "assistant") {
    ordered_json msg = {{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) msg["tool_calls"] = calls;
    if (!calls.empty() && text.empty()) msg["content"] = nullptr;
    out.push_back(std::move(msg));
  } else if (!text.empty() || content.empty()) {
    out.push_back({{"role", "user"}, {"content", text}});
  }
}

std::string StopReason(const ParsedReply& reply, const std::string& finish_reason) {
  if (!reply.calls.empty()) return "tool_use";
  return finish_reason == "length" ? "max_tokens" : "end_turn";
}

std::string ToolUseId(ToolCallFormat format) {
  std::string id = NewToolCallId(format);
  return id.starts_with("call_") ? "toolu_" + id.substr(5) : id;
}

json UsageJson(const DialectUsage& u) {
  return {{"input_tokens", u.input_tokens},
          {"output_tokens", u.output_tokens},
          {"cache_read_input_tokens", u.cached_tokens},
          {"cache_creation_input_tokens", 0}};
}

std::string Event(const json& data) {
  return "event: " + data["type"].get<std::string>() + "\ndata: " + DialectDump(data) + "\n\n";
}

}  // namespace

DialectRequest TranslateMessagesRequest(std::string_view body) {
  const ordered_json in = ParseDialectBody(body);
  DialectRequest r;
  ordered_json out = ordered_json::object();
  // Anthropic fields with no effect here, accepted silently; the rest unknown to moex are
  // listed (thinking included: moex does not switch a model's reasoning on or off).
  static const std::set<std::string> kKnown = {
      "model",       "messages",    "system",       "max_tokens",   "stop_sequences",
      "stream",      "temperature", "top_p",        "top_k",        "tools",
      "tool_choice", "metadata",    "service_tier", "output_config"};
  // OpenAI-side extensions passed through as they are (checked by the OpenAI parser).
  static const std::set<std::string> kExtensions = {"seed", "min_p", "repetition_penalty",
                                                    "presence_penalty", "frequency_penalty"};
  for (const auto& [key, value] : in.items()) {
    if (kExtensions.contains(key)) {
      out[key] = value;
    } else if (!kKnown.contains(key)) {
      r.ignored.push_back(key);
    }
  }
  if (in.contains("model")) {
    if (!in["model"].is_string()) BadField("model", "must be a string");
    r.model = in["model"].get<std::string>();
    out["model"] = r.model;
  }
  if (!in.contains("max_tokens") || in["max_tokens"].is_null())
    BadField("max_tokens", "is required (the most tokens to generate)");
  out["max_tokens"] = in["max_tokens"];
  ordered_json messages = ordered_json::array();
  if (in.contains("system") && !in["system"].is_null())
    messages.push_back({{"role", "system"}, {"content", TextOf(in["system"], "system")}});
  if (!in.contains("messages") || !in["messages"].is_array() || in["messages"].empty())
    BadField("messages", "must be a non-empty array of messages");
  for (size_t i = 0; i < in["messages"].size(); ++i)
    AddMessage(in["messages"][i], "messages." + std::to_string(i), messages);
  out["messages"] = std::move(messages);
  for (const char* key : {"temperature", "top_p", "top_k", "stream"})
    if (in.contains(key)) out[key] = in[key];
  if (in.contains("stop_sequences") && !in["stop_sequences"].is_null())
    out["stop"] = in["stop_sequences"];
  if (in.contains("tools") && !in["tools"].is_null()) {
    if (!in["tools"].is_array()) BadField("tools", "must be an array");
    ordered_json tools = ordered_json::array();
    for (size_t i = 0; i < in["tools"].size(); ++i) {
      const std::string at = "tools." + std::to_string(i);
      const ordered_json& t = in["tools"][i];
      if (!t.is_object()) BadField(at, "must be a tool object");
      if (t.contains("type") && t["type"] != "custom")
        BadField(at + ".type", "server tools (" + t["type"].dump() +
                                   ") are not supported: give client tools with name, description "
                                   "and input_schema");
      if (!t.contains("name") || !t["name"].is_string()) BadField(at + ".name", "must be a string");
      ordered_json function = {{"name", t["name"]}};
      if (t.contains("description")) function["description"] = t["description"];
      function["parameters"] =
          t.contains("input_schema") ? t["input_schema"] : ordered_json::object();
      tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    out["tools"] = std::move(tools);
  }
  if (in.contains("tool_choice") && !in["tool_choice"].is_null()) {
    const ordered_json& c = in["tool_choice"];
    const std::string type = StringField(c, "type");
    if (type == "auto" || type == "none") {
      out["tool_choice"] = type;
    } else if (type == "any") {
      out["tool_choice"] = "required";
    } else if (type == "tool") {
      if (!c.contains("name") || !c["name"].is_string())
        BadField("tool_choice.name", "must name the tool");
      out["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    } else {
      BadField("tool_choice", "must be {\"type\": auto, any, tool (with a name) or none}");
    }
  }
  // Structured outputs: output_config.format {type: json_schema, schema} (effort, the other
  // field, has no meaning here).
  if (in.contains("output_config") && !in["output_config"].is_null()) {
    const ordered_json& config = in["output_config"];
    if (!config.is_object()) BadField("output_config", "must be an object");
    if (config.contains("format") && !config["format"].is_null()) {
      const ordered_json& f = config["format"];
      if (StringField(f, "type") != "json_schema" || !f.contains("schema"))
        BadField("output_config.format", "must be {\"type\": \"json_schema\", \"schema\": {...}}");
      out["response_format"] = {{"type", "json_schema"},
                                {"json_schema", {{"name", "output"}, {"schema", f["schema"]}}}};
    }
  }
  r.chat_body = out.dump();
  return r;
}

json MessagesErrorBody(int status, const std::string& message) {
  std::string type = "api_error";
  if (status == 400) type = "invalid_request_error";
  if (status == 404) type = "not_found_error";
  if (status == 413) type = "request_too_large";
  if (status == 429) type = "rate_limit_error";
  if (status == 503) type = "overloaded_error";
  if (status == 504) type = "timeout_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

json MessagesResponse(const std::string& id, const std::string& model, const ParsedReply& reply,
                      const std::string& finish_reason, const DialectUsage& usage,
                      ToolCallFormat format) {
  json content = json::array();
  if (!reply.content.empty() || reply.calls.empty())
    content.push_back({{"type", "text"}, {"text", reply.content}});
  for (const ToolCall& c : reply.calls) {
    json input = json::parse(c.arguments, nullptr, false, true);
    if (input.is_discarded()) input = json::object();  // Calls are parsed JSON; never here.
    content.push_back(
        {{"type", "tool_use"}, {"id", ToolUseId(format)}, {"name", c.name}, {"input", input}});
  }
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", std::move(content)},
          {"stop_reason", StopReason(reply, finish_reason)},
          {"stop_sequence", nullptr},
          {"usage", UsageJson(usage)}};
}

std::string MessagesStream::Start(int64_t input_tokens) {
  DialectUsage usage;
  usage.input_tokens = input_tokens;
  const json message = {{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", model_},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", UsageJson(usage)}};
  return Event({{"type", "message_start"}, {"message", message}}) + Event({{"type", "ping"}});
}

std::string MessagesStream::Text(const std::string& text) {
  if (text.empty()) return "";
  std::string out;
  if (!text_open_) {
    text_open_ = true;
    out += Event({{"type", "content_block_start"},
                  {"index", block_},
                  {"content_block", {{"type", "text"}, {"text", ""}}}});
  }
  return out + Event({{"type", "content_block_delta"},
                      {"index", block_},
                      {"delta", {{"type", "text_delta"}, {"text", text}}}});
}

std::string MessagesStream::CloseText() {
  if (!text_open_) return "";
  text_open_ = false;
  return Event({{"type", "content_block_stop"}, {"index", block_++}});
}

std::string MessagesStream::Finish(const ParsedReply& rest, const std::string& finish_reason,
                                   const DialectUsage& usage) {
  std::string out = Text(rest.content);
  out += CloseText();
  for (const ToolCall& c : rest.calls) {
    out += Event({{"type", "content_block_start"},
                  {"index", block_},
                  {"content_block",
                   {{"type", "tool_use"},
                    {"id", ToolUseId(format_)},
                    {"name", c.name},
                    {"input", json::object()}}}});
    out += Event({{"type", "content_block_delta"},
                  {"index", block_},
                  {"delta", {{"type", "input_json_delta"}, {"partial_json", c.arguments}}}});
    out += Event({{"type", "content_block_stop"}, {"index", block_++}});
  }
  out += Event(
      {{"type", "message_delta"},
       {"delta", {{"stop_reason", StopReason(rest, finish_reason)}, {"stop_sequence", nullptr}}},
       {"usage", {{"output_tokens", usage.output_tokens}}}});
  return out + Event({{"type", "message_stop"}});
}

std::string MessagesStream::Error(int status, const std::string& message) {
  return Event(MessagesErrorBody(status, message));
}

}  // namespace moex::serve

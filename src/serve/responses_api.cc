#include "serve/responses_api.h"

#include <random>
#include <set>

#include "serve/api_error.h"
#include "serve/dialect_json.h"

namespace moex::serve {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string ItemId(const char* prefix) {
  static constexpr char kHex[] = "0123456789abcdef";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix;
  for (int i = 0; i < 32; ++i) id += kHex[rng() % 16];
  return id;
}

// A message's content: a string, or parts of text (input_text, output_text, text; a refusal
// counts as text).
std::string ContentText(const ordered_json& content, const std::string& at) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) BadField(at, "must be a string or an array of content parts");
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string pat = at + "." + std::to_string(j);
    const ordered_json& p = content[j];
    const std::string type = StringField(p, "type");
    if (type == "input_text" || type == "output_text" || type == "text") {
      if (!p.contains("text") || !p["text"].is_string())
        BadField(pat + ".text", "must be a string");
      text += p["text"].get<std::string>();
    } else if (type == "refusal") {
      text += StringField(p, "refusal", "");
    } else {
      BadField(pat + ".type", "'" + type +
                                  "' parts are not supported (moex serves text-only "
                                  "models: input_text and output_text are)");
    }
  }
  return text;
}

void AddItems(const ordered_json& input, ordered_json& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return;
  }
  if (!input.is_array()) BadField("input", "must be a string or an array of input items");
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string at = "input." + std::to_string(i);
    const ordered_json& item = input[i];
    if (!item.is_object()) BadField(at, "must be an input item object");
    const std::string type = StringField(item, "type", item.contains("role") ? "message" : "");
    if (type == "message") {
      std::string role = StringField(item, "role", "");
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        BadField(at + ".role", "must be user, assistant, system or developer");
      if (!item.contains("content")) BadField(at + ".content", "is required");
      messages.push_back(
          {{"role", role}, {"content", ContentText(item["content"], at + ".content")}});
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"})
        if (!item.contains(key) || !item[key].is_string())
          BadField(at + "." + key, "must be a string");
      const ordered_json call = {
          {"id", item["call_id"]},
          {"type", "function"},
          {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      // Calls after an assistant turn (its text, or earlier calls) belong to that turn.
      if (!messages.empty() && messages.back()["role"] == "assistant") {
        ordered_json& last = messages.back();
        if (!last.contains("tool_calls")) last["tool_calls"] = ordered_json::array();
        last["tool_calls"].push_back(call);
      } else {
        messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}});
      }
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string())
        BadField(at + ".call_id", "must be a string");
      if (!item.contains("output")) BadField(at + ".output", "is required");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", item["call_id"]},
                          {"content", ContentText(item["output"], at + ".output")}});
    } else if (type == "reasoning") {
      // A reasoning model's earlier thoughts: not part of the prompt.
    } else if (type == "item_reference") {
      BadField(at, "moex keeps no items to refer to: send the item itself");
    } else {
      BadField(at + ".type", "'" + type +
                                 "' items are not supported (message, function_call and "
                                 "function_call_output are)");
    }
  }
}

json UsageJson(const DialectUsage& u) {
  return {{"input_tokens", u.input_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.output_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", u.input_tokens + u.output_tokens}};
}

json MessageItem(const std::string& id, const std::string& text, const std::string& status) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content",
           status == "in_progress"
               ? json::array()
               : json::array(
                     {{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}})}};
}

json CallItem(const ToolCall& c, ToolCallFormat format, const std::string& status) {
  return {{"type", "function_call"},
          {"id", ItemId("fc_")},
          {"call_id", NewToolCallId(format)},
          {"name", c.name},
          {"arguments", status == "in_progress" ? "" : c.arguments},
          {"status", status}};
}

void SetOutcome(json& response, const std::string& finish_reason, const DialectUsage& usage) {
  const bool incomplete = finish_reason == "length";
  response["status"] = incomplete ? "incomplete" : "completed";
  response["incomplete_details"] =
      incomplete ? json{{"reason", "max_output_tokens"}} : json(nullptr);
  response["usage"] = UsageJson(usage);
}

}  // namespace

DialectRequest TranslateResponsesRequest(std::string_view body) {
  const ordered_json in = ParseDialectBody(body);
  DialectRequest r;
  ordered_json out = ordered_json::object();
  static const std::set<std::string> kKnown = {"model",
                                               "input",
                                               "instructions",
                                               "max_output_tokens",
                                               "temperature",
                                               "top_p",
                                               "stream",
                                               "tools",
                                               "tool_choice",
                                               "text",
                                               "parallel_tool_calls",
                                               "metadata",
                                               "store",
                                               "user",
                                               "truncation",
                                               "service_tier",
                                               "previous_response_id",
                                               "conversation",
                                               "prompt",
                                               "background",
                                               "stream_options"};
  static const std::set<std::string> kExtensions = {
      "seed", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"};
  for (const auto& [key, value] : in.items()) {
    if (kExtensions.contains(key))
      out[key] = value;
    else if (!kKnown.contains(key))
      r.ignored.push_back(key);
  }
  for (const char* key : {"previous_response_id", "conversation", "prompt"})
    if (in.contains(key) && !in[key].is_null())
      BadField(key,
               "moex keeps no responses, conversations or prompts: send the whole conversation "
               "as 'input'");
  if (BoolField(in, "background", false))
    BadField("background", "background responses are not supported");
  if (in.contains("model")) {
    if (!in["model"].is_string()) BadField("model", "must be a string");
    r.model = in["model"].get<std::string>();
    out["model"] = r.model;
  }
  ordered_json messages = ordered_json::array();
  if (in.contains("instructions") && !in["instructions"].is_null()) {
    if (!in["instructions"].is_string()) BadField("instructions", "must be a string");
    messages.push_back({{"role", "system"}, {"content", in["instructions"]}});
    r.echo["instructions"] = in["instructions"];
  }
  if (!in.contains("input")) BadField("input", "is required");
  AddItems(in["input"], messages);
  if (messages.empty()) BadField("input", "holds no message");
  out["messages"] = std::move(messages);
  if (in.contains("max_output_tokens") && !in["max_output_tokens"].is_null()) {
    out["max_tokens"] = in["max_output_tokens"];
    r.echo["max_output_tokens"] = in["max_output_tokens"];
  }
  for (const char* key : {"temperature", "top_p", "stream"})
    if (in.contains(key)) out[key] = in[key];
  if (in.contains("tools") && !in["tools"].is_null()) {
    if (!in["tools"].is_array()) BadField("tools", "must be an array");
    ordered_json tools = ordered_json::array();
    for (size_t i = 0; i < in["tools"].size(); ++i) {
      const std::string at = "tools." + std::to_string(i);
      const ordered_json& t = in["tools"][i];
      if (!t.is_object() || StringField(t, "type", "") != "function")
        BadField(at + ".type",
                 "only function tools are supported (no hosted tools such as web search)");
      if (!t.contains("name") || !t["name"].is_string()) BadField(at + ".name", "must be a string");
      ordered_json function = {{"name", t["name"]}};
      if (t.contains("description")) function["description"] = t["description"];
      function["parameters"] = t.contains("parameters") && !t["parameters"].is_null()
                                   ? t["parameters"]
                                   : ordered_json::object();
      tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    out["tools"] = tools;
    r.echo["tools"] = json::parse(in["tools"].dump());
  }
  if (in.contains("tool_choice") && !in["tool_choice"].is_null()) {
    const ordered_json& c = in["tool_choice"];
    if (c.is_string()) {
      out["tool_choice"] = c;
    } else if (c.is_object() && StringField(c, "type", "") == "function" && c.contains("name")) {
      out["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    } else {
      BadField("tool_choice",
               "must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
    }
    r.echo["tool_choice"] = json::parse(c.dump());
  }
  if (in.contains("text") && !in["text"].is_null()) {
    const ordered_json& text = in["text"];
    if (!text.is_object()) BadField("text", "must be an object");
    if (text.contains("format") && !text["format"].is_null()) {
      const ordered_json& f = text["format"];
      const std::string type = StringField(f, "type");
      if (type == "json_object") {
        out["response_format"] = {{"type", "json_object"}};
      } else if (type == "json_schema") {
        if (!f.contains("schema")) BadField("text.format.schema", "is required");
        ordered_json spec = {{"name", StringField(f, "name", "response")}, {"schema", f["schema"]}};
        if (f.contains("strict")) spec["strict"] = f["strict"];
        out["response_format"] = {{"type", "json_schema"}, {"json_schema", spec}};
      } else if (type != "text") {
        BadField("text.format.type", "must be text, json_object or json_schema");
      }
      r.echo["text"] = json::parse(text.dump());
    }
  }
  r.chat_body = out.dump();
  return r;
}

json ResponsesBase(const std::string& id, int64_t created_at, const std::string& model,
                   const DialectRequest& request) {
  json base = {{"id", id},
               {"object", "response"},
               {"created_at", created_at},
               {"status", "in_progress"},
               {"error", nullptr},
               {"incomplete_details", nullptr},
               {"instructions", request.echo.value("instructions", json())},
               {"max_output_tokens", request.echo.value("max_output_tokens", json())},
               {"model", model},
               {"output", json::array()},
               {"parallel_tool_calls", true},
               {"previous_response_id", nullptr},
               {"store", false},
               {"text", request.echo.value("text", json{{"format", {{"type", "text"}}}})},
               {"tool_choice", request.echo.value("tool_choice", json("auto"))},
               {"tools", request.echo.value("tools", json::array())},
               {"truncation", "disabled"},
               {"usage", nullptr},
               {"metadata", json::object()}};
  return base;
}

json ResponsesResponse(json base, const ParsedReply& reply, const std::string& finish_reason,
                       const DialectUsage& usage, ToolCallFormat format) {
  json output = json::array();
  if (!reply.content.empty() || reply.calls.empty())
    output.push_back(MessageItem(ItemId("msg_"), reply.content, "completed"));
  for (const ToolCall& c : reply.calls) output.push_back(CallItem(c, format, "completed"));
  base["output"] = std::move(output);
  SetOutcome(base, finish_reason, usage);
  return base;
}

std::string ResponsesStream::Event(json data) {
  data["sequence_number"] = sequence_++;
  return "event: " + data["type"].get<std::string>() + "\ndata: " + DialectDump(data) + "\n\n";
}

std::string ResponsesStream::Start() {
  // Events are numbered as they are made: one statement each (the operands of + are
  // evaluated in no set order).
  std::string out = Event({{"type", "response.created"}, {"response", base_}});
  out += Event({{"type", "response.in_progress"}, {"response", base_}});
  return out;
}

std::string ResponsesStream::OpenMessage() {
  if (!message_id_.empty()) return "";
  const int64_t index = static_cast<int64_t>(output_.size());
  message_id_ = ItemId("msg_");
  std::string out = Event({{"type", "response.output_item.added"},
                           {"output_index", index},
                           {"item", MessageItem(message_id_, "", "in_progress")}});
  return out +
         Event({{"type", "response.content_part.added"},
                {"item_id", message_id_},
                {"output_index", index},
                {"content_index", 0},
                {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
}

std::string ResponsesStream::Text(const std::string& text) {
  if (text.empty()) return "";
  std::string out = OpenMessage();
  text_ += text;
  return out + Event({{"type", "response.output_text.delta"},
                      {"item_id", message_id_},
                      {"output_index", static_cast<int64_t>(output_.size())},
                      {"content_index", 0},
                      {"delta", text},
                      {"logprobs", json::array()}});
}

std::string ResponsesStream::CloseMessage() {
  if (message_id_.empty()) return "";
  const int64_t index = static_cast<int64_t>(output_.size());
  const json item = MessageItem(message_id_, text_, "completed");
  std::string out = Event({{"type", "response.output_text.done"},
                           {"item_id", message_id_},
                           {"output_index", index},
                           {"content_index", 0},
                           {"text", text_},
                           {"logprobs", json::array()}});
  out += Event({{"type", "response.content_part.done"},
                {"item_id", message_id_},
                {"output_index", index},
                {"content_index", 0},
                {"part", item["content"][0]}});
  out += Event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  output_.push_back(item);
  message_id_.clear();
  return out;
}

std::string ResponsesStream::Finish(const ParsedReply& rest, const std::string& finish_reason,
                                    const DialectUsage& usage) {
  std::string out = Text(rest.content);
  // A reply of nothing at all still has its (empty) message, as the whole response does.
  if (output_.empty() && rest.calls.empty()) out += OpenMessage();
  out += CloseMessage();
  for (const ToolCall& c : rest.calls) {
    const int64_t index = static_cast<int64_t>(output_.size());
    json item = CallItem(c, format_, "in_progress");
    out += Event({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
    out += Event({{"type", "response.function_call_arguments.delta"},
                  {"item_id", item["id"]},
                  {"output_index", index},
                  {"delta", c.arguments}});
    out += Event({{"type", "response.function_call_arguments.done"},
                  {"item_id", item["id"]},
                  {"output_index", index},
                  {"arguments", c.arguments}});
    item["arguments"] = c.arguments;
    item["status"] = "completed";
    out += Event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
    output_.push_back(std::move(item));
  }
  json response = base_;
  response["output"] = output_;
  SetOutcome(response, finish_reason, usage);
  const std::string type =
      response["status"] == "completed" ? "response.completed" : "response.incomplete";
  return out + Event({{"type", type}, {"response", response}});
}

std::string ResponsesStream::Error(int status, const std::string& message) {
  return Event({{"type", "error"},
                {"code", status >= 500 ? "server_error" : "invalid_request_error"},
                {"message", message},
                {"param", nullptr}});
}

}  // namespace moex::serve

#include "serve/tool_calls.h"

#include <cctype>
#include <functional>
#include <random>
#include <set>

#include "core/error.h"
#include "serve/stop_text.h"

namespace moex::serve {

namespace {

using OJson = nlohmann::ordered_json;
using E = GrammarExpr;

constexpr const char* kHermesOpen = "<tool_call>";
constexpr const char* kHermesClose = "</tool_call>";
constexpr const char* kMistralOpen = "[TOOL_CALLS]";
// DeepSeek's markers (U+FF5C for the bars, U+2581 for the spaces).
constexpr const char* kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr const char* kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr const char* kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr const char* kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr const char* kDsSep = "<｜tool▁sep｜>";
constexpr const char* kGlmKeyOpen = "<arg_key>";
constexpr const char* kGlmKeyClose = "</arg_key>";
constexpr const char* kGlmValueOpen = "<arg_value>";
constexpr const char* kGlmValueClose = "</arg_value>";
constexpr const char* kMiniMaxOpen = "<minimax:tool_call>";
constexpr const char* kMiniMaxClose = "</minimax:tool_call>";
constexpr const char* kMiniMaxInvoke = "<invoke name=\"";
constexpr const char* kMiniMaxInvokeClose = "</invoke>";
constexpr const char* kMiniMaxParameter = "<parameter name=\"";
constexpr const char* kMiniMaxParameterClose = "</parameter>";
// Harmony's special tokens.
constexpr const char* kHarmonyStart = "<|start|>";
constexpr const char* kHarmonyChannel = "<|channel|>";
constexpr const char* kHarmonyConstrain = "<|constrain|>";
constexpr const char* kHarmonyMessage = "<|message|>";
constexpr const char* kHarmonyEnds[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};

// The marker a reply's calls begin with.
std::string OpenMarker(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kGlm:
      return kHermesOpen;
    case ToolCallFormat::kMistral:
      return kMistralOpen;
    case ToolCallFormat::kMiniMax:
      return kMiniMaxOpen;
    case ToolCallFormat::kDeepSeekV3:
    case ToolCallFormat::kDeepSeekV31:
      return kDsCallsBegin;
    case ToolCallFormat::kHarmony:  // Streamed by ToolCallStream::PushHarmony.
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

// A function name as the API allows them ([A-Za-z0-9_-]{1,64}): a name written outside the
// JSON (DeepSeek, GLM, harmony) that is not one is no call.
bool FunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// A name and a JSON object's text as a ToolCall; false when either is not one.
bool ReadNamedCall(const std::string& name, const std::string& arguments, ToolCall* out) {
  const OJson args = OJson::parse(arguments, nullptr, false);
  if (!FunctionName(name) || !args.is_object()) return false;
  out->name = name;
  out->arguments = args.dump();
  return true;
}

// The blocks from `open` to `close` in `text`, in order: a block `read` turns into a call is
// one; the text outside them, and a block it does not read, is content. An unclosed last
// block (the reply hit max_tokens) runs to the end.
ParsedReply ParseBlocks(const std::string& text, const std::string& open, const std::string& close,
                        const std::function<bool(const std::string&, ToolCall*)>& read) {
  ParsedReply out;
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open_at = text.find(open, at);
    if (open_at == std::string::npos) break;
    const size_t body = open_at + open.size();
    const size_t close_at = text.find(close, body);
    const size_t end = close_at == std::string::npos ? text.size() : close_at;
    const size_t next = close_at == std::string::npos ? text.size() : close_at + close.size();
    ToolCall c;
    if (read(text.substr(body, end - body), &c)) {
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

bool ReadHermes(const std::string& body, ToolCall* out) {
  return ReadCall(nlohmann::json::parse(body, nullptr, false), out);
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

// A DeepSeek call's body (between its begin and end markers). V3: `function<sep>NAME\n```json
// \nARGS\n````; V3.1: `NAME<sep>ARGS`.
bool ReadDeepSeek(bool v3, const std::string& body, ToolCall* out) {
  const size_t sep = body.find(kDsSep);
  if (sep == std::string::npos) return false;
  const std::string after = body.substr(sep + std::string(kDsSep).size());
  if (!v3) return ReadNamedCall(Trim(body.substr(0, sep)), after, out);
  const size_t newline = after.find('\n');
  if (newline == std::string::npos) return false;
  std::string args = Trim(after.substr(newline + 1));
  if (args.starts_with("```json")) args.erase(0, 7);
  if (args.ends_with("```")) args.erase(args.size() - 3);
  return ReadNamedCall(Trim(after.substr(0, newline)), args, out);
}

// Text outside the calls block is content; inside it, one block per call.
ParsedReply ParseDeepSeek(bool v3, const std::string& text) {
  const size_t begin = text.find(kDsCallsBegin);
  if (begin == std::string::npos) return ParsedReply{Trim(text), {}};
  const size_t inside = begin + std::string(kDsCallsBegin).size();
  const size_t end = text.find(kDsCallsEnd, inside);
  const std::string region =
      text.substr(inside, end == std::string::npos ? std::string::npos : end - inside);
  const std::string after =
      end == std::string::npos ? "" : text.substr(end + std::string(kDsCallsEnd).size());
  ParsedReply out =
      ParseBlocks(region, kDsCallBegin, kDsCallEnd,
                  [v3](const std::string& body, ToolCall* c) { return ReadDeepSeek(v3, body, c); });
  out.content = Trim(text.substr(0, begin) + out.content + after);
  return out;
}

// A parameter written raw by GLM's templates (`v if v is string`): a string-typed schema, or an
// enum / const of strings.
bool StringTyped(const OJson& schema) {
  if (!schema.is_object()) return false;
  if (schema.contains("type")) return schema["type"] == "string";
  if (schema.contains("const")) return schema["const"].is_string();
  if (!schema.contains("enum") || !schema["enum"].is_array() || schema["enum"].empty())
    return false;
  for (const auto& v : schema["enum"])
    if (!v.is_string()) return false;
  return true;
}

// The schema of parameter `key` of function `name` among `tools`; null when there is none.
const OJson* ParameterSchema(const OJson& tools, const std::string& name, const std::string& key) {
  if (!tools.is_array()) return nullptr;
  for (const auto& tool : tools) {
    if (!tool.contains("function") || tool["function"].value("name", "") != name) continue;
    const OJson& f = tool["function"];
    if (!f.contains("parameters") || !f["parameters"].is_object()) return nullptr;
    const OJson& p = f["parameters"];
    if (!p.contains("properties") || !p["properties"].is_object()) return nullptr;
    auto it = p["properties"].find(key);
    return it == p["properties"].end() ? nullptr : &*it;
  }
  return nullptr;
}

// Argument `v` of parameter `k` of function `name` written raw (GLM, MiniMax): a string when
// the function's schema types it so, else JSON when it parses (`0150` stays a string).
OJson TypedArgument(const OJson& tools, const std::string& name, const std::string& k,
                    const std::string& v) {
  const OJson* schema = ParameterSchema(tools, name, k);
  OJson parsed = schema && StringTyped(*schema) ? OJson(v) : OJson::parse(v, nullptr, false);
  return parsed.is_discarded() ? OJson(v) : std::move(parsed);
}

// A MiniMax block's body: one or more <invoke name="N"> ... </invoke>, each with
// <parameter name="K">V</parameter> arguments. Calls that do not parse are dropped; false
// when none does.
bool ReadMiniMax(const OJson& tools, const std::string& body, std::vector<ToolCall>* out) {
  const size_t before = out->size();
  const std::string invoke = kMiniMaxInvoke, parameter = kMiniMaxParameter;
  for (size_t at = body.find(invoke); at != std::string::npos; at = body.find(invoke, at)) {
    const size_t name = at + invoke.size();
    const size_t name_end = body.find("\">", name);
    if (name_end == std::string::npos) break;
    const size_t end = std::min(body.find(kMiniMaxInvokeClose, name_end), body.size());
    const std::string fname = body.substr(name, name_end - name);
    at = end;
    if (!FunctionName(fname)) continue;
    OJson args = OJson::object();
    bool whole = true;
    for (size_t p = body.find(parameter, name_end); p < end; p = body.find(parameter, p)) {
      const size_t key = p + parameter.size();
      const size_t key_end = body.find("\">", key);
      const size_t value_end = body.find(kMiniMaxParameterClose, key);
      if (key_end == std::string::npos || value_end == std::string::npos || value_end > end ||
          key_end > value_end) {
        whole = false;
        break;
      }
      const std::string k = body.substr(key, key_end - key);
      args[k] = TypedArgument(tools, fname, k, body.substr(key_end + 2, value_end - key_end - 2));
      p = value_end;
    }
    if (!whole) continue;
    ToolCall c;
    c.name = fname;
    c.arguments = args.dump(-1, ' ', false, OJson::error_handler_t::replace);
    out->push_back(std::move(c));
  }
  return out->size() > before;
}

// MiniMax's blocks, each holding any number of calls; the text outside them (and a block
// without a call) is content. An unclosed last block runs to the end.
ParsedReply ParseMiniMax(const std::string& text, const OJson& tools) {
  ParsedReply out;
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kMiniMaxOpen, at);
    if (open == std::string::npos) break;
    const size_t body = open + std::string(kMiniMaxOpen).size();
    const size_t close = text.find(kMiniMaxClose, body);
    const size_t end = close == std::string::npos ? text.size() : close;
    const size_t next =
        close == std::string::npos ? text.size() : close + std::string(kMiniMaxClose).size();
    content += text.substr(at, open - at);
    if (!ReadMiniMax(tools, text.substr(body, end - body), &out.calls))
      content += text.substr(open, next - open);
    at = next;
  }
  content += text.substr(std::min(at, text.size()));
  out.content = Trim(content);
  return out;
}

// A GLM call's body: NAME, then <arg_key>K</arg_key><arg_value>V</arg_value> pairs.
bool ReadGlm(const OJson& tools, const std::string& body, ToolCall* out) {
  const size_t first = body.find(kGlmKeyOpen);
  const std::string name = Trim(body.substr(0, first));
  if (!FunctionName(name)) return false;
  OJson args = OJson::object();
  for (size_t at = first; at != std::string::npos; at = body.find(kGlmKeyOpen, at)) {
    const size_t key = at + std::string(kGlmKeyOpen).size();
    const size_t key_end = body.find(kGlmKeyClose, key);
    if (key_end == std::string::npos) return false;
    const size_t value_open = body.find(kGlmValueOpen, key_end);
    if (value_open == std::string::npos) return false;
    const size_t value = value_open + std::string(kGlmValueOpen).size();
    const size_t value_end = body.find(kGlmValueClose, value);
    if (value_end == std::string::npos) return false;
    const std::string k = Trim(body.substr(key, key_end - key));
    args[k] = TypedArgument(tools, name, k, body.substr(value, value_end - value));
    at = value_end;
  }
  out->name = name;
  // The raw values may hold bytes that are not UTF-8 (the parser takes any text).
  out->arguments = args.dump(-1, ' ', false, OJson::error_handler_t::replace);
  return true;
}

// A harmony reply's messages: calls (to functions offered in `tools`) and the content (the
// final channel and commentary to no one, untrimmed). Text before the first special token is
// content as it stands (a reply without any); an unfinished last header is nothing yet.
ParsedReply ParseHarmonyRaw(const std::string& text, const OJson& tools) {
  ParsedReply out;
  const bool keep_calls = tools.is_array() && !tools.empty();
  size_t at = std::min(text.find("<|"), text.size());
  out.content = text.substr(0, at);
  while (at < text.size()) {
    const size_t message = text.find(kHarmonyMessage, at);
    if (message == std::string::npos) break;  // An unfinished header.
    const std::string header = text.substr(at, message - at);
    const size_t body = message + std::string(kHarmonyMessage).size();
    size_t end = text.size(), next = text.size();
    for (const char* marker : kHarmonyEnds) {
      const size_t m = text.find(marker, body);
      if (m < end) {
        end = m;
        // A next message's <|start|> is the start of its header, which skips it.
        next = m + std::string(marker).size();
      }
    }
    const std::string content = text.substr(body, end - body);
    std::string channel, recipient;
    if (const size_t c = header.find(kHarmonyChannel); c != std::string::npos) {
      const size_t from = c + std::string(kHarmonyChannel).size();
      channel = header.substr(from, header.find_first_of(" <", from) - from);
    }
    if (const size_t to = header.find(" to="); to != std::string::npos) {
      recipient = header.substr(to + 4, header.find_first_of(" <", to + 4) - to - 4);
    } else if (header.starts_with("to=")) {
      recipient = header.substr(3, header.find_first_of(" <") - 3);
    }
    if (recipient.starts_with("functions.")) {
      ToolCall c;
      if (keep_calls && ReadNamedCall(recipient.substr(10), content, &c))
        out.calls.push_back(std::move(c));
    } else if (recipient.empty() && channel != "analysis") {
      out.content += content;
    }
    at = next;
  }
  return out;
}

// The arguments of a function with `parameters` written as tags (GLM, MiniMax): each
// property, in the schema's order, as `item(key, value)`, required ones always, the others
// optional. A string-typed value is raw text without '<'; any other is JSON valid against
// the property's schema.
E TaggedArguments(GrammarBuilder& b, const OJson& parameters, const JsonSchemaOptions& options,
                  const std::function<E(const std::string&, E)>& item) {
  if (!parameters.is_object() || !parameters.contains("properties") ||
      !parameters["properties"].is_object())
    return E::Empty();
  std::set<std::string> required;
  if (parameters.contains("required") && parameters["required"].is_array())
    for (const auto& r : parameters["required"])
      if (r.is_string()) required.insert(r.get<std::string>());
  std::vector<E> items;
  for (const auto& [key, schema] : parameters["properties"].items()) {
    E value;
    if (StringTyped(schema) && (schema.contains("enum") || schema.contains("const"))) {
      std::vector<E> values;
      for (const auto& v :
           schema.contains("const") ? OJson::array({schema["const"]}) : schema["enum"])
        values.push_back(E::Literal(v.get<std::string>()));
      value = E::Alt(std::move(values));
    } else if (StringTyped(schema)) {
      value = E::Repeat(E::Chars({{'<', '<'}}, true), 0, E::kUnbounded);
    } else {
      value = JsonSchemaExpr(b, parameters, options, "/properties/" + JsonPointerToken(key));
    }
    E tagged = item(key, value);
    items.push_back(required.contains(key) ? tagged : E::Repeat(tagged, 0, 1));
  }
  return E::Seq(std::move(items));
}

}  // namespace

ToolCallFormat DetectToolCallFormat(const std::string& source) {
  if (source.find(kMistralOpen) != std::string::npos) return ToolCallFormat::kMistral;
  if (source.find(kHarmonyChannel) != std::string::npos) return ToolCallFormat::kHarmony;
  if (source.find(kDsCallBegin) != std::string::npos)
    return source.find("```json") != std::string::npos ? ToolCallFormat::kDeepSeekV3
                                                       : ToolCallFormat::kDeepSeekV31;
  if (source.find(kMiniMaxOpen) != std::string::npos) return ToolCallFormat::kMiniMax;
  if (source.find(kGlmKeyOpen) != std::string::npos) return ToolCallFormat::kGlm;
  if (source.find(kHermesOpen) != std::string::npos) return ToolCallFormat::kHermes;
  return ToolCallFormat::kNone;
}

bool TemplateRendersTools(const std::string& source) {
  return source.find("tools") != std::string::npos;
}

bool ArgumentsAsText(ToolCallFormat format) {
  return format == ToolCallFormat::kDeepSeekV3;
}

std::string WriteToolCall(ToolCallFormat format, const ToolCall& call) {
  const std::string name = call.name, args = call.arguments;
  const std::string json_call =
      "{\"name\": " + nlohmann::json(name).dump() + ", \"arguments\": " + args + "}";
  switch (format) {
    case ToolCallFormat::kHermes:
      return std::string(kHermesOpen) + "\n" + json_call + "\n" + kHermesClose;
    case ToolCallFormat::kMistral:
      return std::string(kMistralOpen) + "[" + json_call + "]";
    case ToolCallFormat::kDeepSeekV3:
      return std::string(kDsCallsBegin) + kDsCallBegin + "function" + kDsSep + name +
             "\n```json\n" + args + "\n```" + kDsCallEnd + kDsCallsEnd;
    case ToolCallFormat::kDeepSeekV31:
      return std::string(kDsCallsBegin) + kDsCallBegin + name + kDsSep + args + kDsCallEnd +
             kDsCallsEnd;
    case ToolCallFormat::kHarmony:
      return std::string(kHarmonyChannel) + "commentary to=functions." + name + " " +
             kHarmonyConstrain + "json" + kHarmonyMessage + args;
    case ToolCallFormat::kGlm: {
      std::string out = kHermesOpen + name;
      const OJson parsed = OJson::parse(args);
      for (const auto& [k, v] : parsed.items())
        out += std::string("\n") + kGlmKeyOpen + k + kGlmKeyClose + "\n" + kGlmValueOpen +
               (v.is_string() ? v.get<std::string>() : v.dump()) + kGlmValueClose;
      return out + "\n" + kHermesClose;
    }
    case ToolCallFormat::kMiniMax: {
      std::string out = std::string(kMiniMaxOpen) + "\n" + kMiniMaxInvoke + name + "\">\n";
      const OJson parsed = OJson::parse(args);
      for (const auto& [k, v] : parsed.items())
        out += kMiniMaxParameter + k + "\">" + (v.is_string() ? v.get<std::string>() : v.dump()) +
               kMiniMaxParameterClose + "\n";
      return out + kMiniMaxInvokeClose + "\n" + kMiniMaxClose;
    }
    case ToolCallFormat::kNone:
      break;
  }
  throw Error("no tool-call format to write a call in");
}

std::string ToolInstructions(ToolCallFormat format, const nlohmann::ordered_json& tools) {
  std::string out =
      "You can call the functions below, each described as JSON: its name, what it does and "
      "its parameters (a JSON Schema).\n\n";
  for (const auto& tool : tools) out += tool["function"].dump() + "\n";
  const ToolCall example{"", "NAME", "{\"PARAMETER\": \"VALUE\"}"};
  out +=
      "\nTo call a function, write the call in exactly this form, with the function's name "
      "and its arguments:\n" +
      WriteToolCall(format, example);
  return out;
}

std::string NewToolCallId(ToolCallFormat format) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = format == ToolCallFormat::kMistral ? "" : "call_";
  const int n = format == ToolCallFormat::kMistral ? 9 : 24;
  for (int i = 0; i < n; ++i) id += kChars[rng() % (sizeof kChars - 1)];
  return id;
}

ParsedReply ParseToolCalls(ToolCallFormat format, const std::string& text,
                           const nlohmann::ordered_json& tools) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseBlocks(text, kHermesOpen, kHermesClose, ReadHermes);
    case ToolCallFormat::kMistral:
      return ParseMistral(text);
    case ToolCallFormat::kDeepSeekV3:
    case ToolCallFormat::kDeepSeekV31:
      return ParseDeepSeek(format == ToolCallFormat::kDeepSeekV3, text);
    case ToolCallFormat::kMiniMax:
      return ParseMiniMax(text, tools);
    case ToolCallFormat::kGlm:
      return ParseBlocks(
          text, kHermesOpen, kHermesClose,
          [&tools](const std::string& body, ToolCall* c) { return ReadGlm(tools, body, c); });
    case ToolCallFormat::kHarmony: {
      ParsedReply out = ParseHarmonyRaw(text, tools);
      out.content = Trim(out.content);
      return out;
    }
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
  JsonSchemaOptions options;
  options.strict = false;  // A function's optional parameters stay optional.
  options.additional_properties_default = false;
  options.compact = compact;
  GrammarBuilder b;
  // One alternative per function: its call, written as the format writes it.
  std::vector<E> calls;
  for (const auto& tool : tools) {
    const auto& f = tool["function"];
    if (!name.empty() && f["name"] != name) continue;
    const std::string fname = f["name"].get<std::string>();
    const OJson parameters = f.contains("parameters") && !f["parameters"].is_null()
                                 ? f["parameters"]
                                 : OJson{{"type", "object"}};
    switch (format) {
      case ToolCallFormat::kHermes:
      case ToolCallFormat::kMistral: {
        const OJson call = {
            {"type", "object"},
            {"properties", {{"name", {{"const", fname}}}, {"arguments", parameters}}},
            {"required", {"name", "arguments"}},
            {"additionalProperties", false}};
        const E json = JsonSchemaExpr(b, call, options);
        calls.push_back(format == ToolCallFormat::kHermes
                            ? E::Seq({E::Literal(std::string(kHermesOpen) + "\n"), json,
                                      E::Literal(std::string("\n") + kHermesClose)})
                            : json);
        break;
      }
      case ToolCallFormat::kDeepSeekV3:
        calls.push_back(E::Seq(
            {E::Literal(std::string(kDsCallBegin) + "function" + kDsSep + fname + "\n```json\n"),
             JsonSchemaExpr(b, parameters, options),
             E::Literal(std::string("\n```") + kDsCallEnd)}));
        break;
      case ToolCallFormat::kDeepSeekV31:
        calls.push_back(E::Seq({E::Literal(std::string(kDsCallBegin) + fname + kDsSep),
                                JsonSchemaExpr(b, parameters, options), E::Literal(kDsCallEnd)}));
        break;
      case ToolCallFormat::kGlm: {
        // <arg_key>K</arg_key><arg_value>V</arg_value>, a newline allowed before each tag.
        const E newline = E::Repeat(E::Literal("\n"), 0, 1);
        const E args =
            TaggedArguments(b, parameters, options, [&](const std::string& key, E value) {
              return E::Seq({newline, E::Literal(kGlmKeyOpen + key + kGlmKeyClose), newline,
                             E::Literal(kGlmValueOpen), value, E::Literal(kGlmValueClose)});
            });
        calls.push_back(
            E::Seq({E::Literal(kHermesOpen + fname), args, newline, E::Literal(kHermesClose)}));
        break;
      }
      case ToolCallFormat::kMiniMax: {
        const E args =
            TaggedArguments(b, parameters, options, [&](const std::string& key, E value) {
              return E::Seq({E::Literal(kMiniMaxParameter + key + "\">"), value,
                             E::Literal(std::string(kMiniMaxParameterClose) + "\n")});
            });
        calls.push_back(E::Seq({E::Literal(kMiniMaxInvoke + fname + "\">\n"), args,
                                E::Literal(std::string(kMiniMaxInvokeClose) + "\n")}));
        break;
      }
      case ToolCallFormat::kHarmony:
        // The special tokens match whole (GrammarBuilder::AllowSpecialToken); the call ends
        // where the grammar does, at the model's <|call|> (an end-of-sequence id).
        calls.push_back(E::Seq(
            {E::Literal(kHarmonyChannel), E::Literal("commentary to=functions." + fname + " "),
             E::Literal(kHarmonyConstrain), E::Literal("json"), E::Literal(kHarmonyMessage),
             JsonSchemaExpr(b, parameters, options)}));
        break;
      case ToolCallFormat::kNone:
        break;
    }
  }
  Check(!calls.empty(), "no tool named '", name, "'");
  E body = E::Alt(std::move(calls));
  if (format == ToolCallFormat::kMistral)
    body = E::Seq({E::Literal(std::string(kMistralOpen) + "["), body, E::Literal("]")});
  if (format == ToolCallFormat::kDeepSeekV3 || format == ToolCallFormat::kDeepSeekV31)
    body = E::Seq({E::Literal(kDsCallsBegin), body, E::Literal(kDsCallsEnd)});
  if (format == ToolCallFormat::kMiniMax)
    body = E::Seq({E::Literal(std::string(kMiniMaxOpen) + "\n"), body, E::Literal(kMiniMaxClose)});
  if (format == ToolCallFormat::kHarmony)
    for (const char* special : {kHarmonyChannel, kHarmonyConstrain, kHarmonyMessage})
      b.AllowSpecialToken(special);
  const uint32_t root = b.Rule("root");
  b.Define(root, body);
  return std::make_shared<const Grammar>(b.Build(root));
}

std::string ToolCallStream::Push(const std::string& text) {
  held_ += text;
  if (format_ == ToolCallFormat::kHarmony) {
    // The content of the text so far, cut before a special token that may be unfinished; it
    // only grows, so what is new is sent.
    size_t cut = held_.size() - PartialMarkerLength(held_, "<|");
    if (const size_t open = held_.rfind("<|");
        open != std::string::npos && held_.find("|>", open) == std::string::npos)
      cut = std::min(cut, open);
    const std::string content = ParseHarmonyRaw(held_.substr(0, cut), tools_).content;
    if (content.size() <= sent_) return "";
    std::string ready = content.substr(sent_);
    sent_ = content.size();
    return ready;
  }
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
  if (format_ == ToolCallFormat::kHarmony) {
    ParsedReply out = ParseHarmonyRaw(held_, tools_);
    out.content = out.content.size() > sent_ ? out.content.substr(sent_) : "";
    if (sent_ == 0) out.content = Trim(out.content);
    held_.clear();
    return out;
  }
  ParsedReply out = ParseToolCalls(format_, held_, tools_);
  held_.clear();
  return out;
}

}  // namespace moex::serve

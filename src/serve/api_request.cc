#include "serve/api_request.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "serve/api_error.h"

namespace moex::serve {

namespace {

using nlohmann::json;

constexpr int kMaxNesting = 64;  // Deeper JSON is no request of ours (and bounds recursion).

[[noreturn]] void Bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// Rejects absurd nesting before the parser recurses into it.
void CheckNesting(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) Bad("", "the JSON body is nested more than 64 levels deep");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

bool Present(const json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

bool GetBool(const json& body, const char* key, bool fallback) {
  if (!Present(body, key)) return fallback;
  const json& v = body[key];
  if (!v.is_boolean()) Bad(key, std::string("'") + key + "' must be a boolean");
  return v.get<bool>();
}

double GetNumber(const json& body, const char* key, double fallback, double lo, double hi) {
  if (!Present(body, key)) return fallback;
  const json& v = body[key];
  if (!v.is_number()) Bad(key, std::string("'") + key + "' must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    Bad(key, std::string("'") + key + "' must be between " + json(lo).dump() + " and " +
                 json(hi).dump() + ", got " + v.dump());
  return x;
}

// An integer (a float with an integral value is accepted, as JSON does not tell them apart).
int64_t GetInteger(const json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  if (!Present(body, key)) return fallback;
  const json& v = body[key];
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    x = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
            ? std::numeric_limits<int64_t>::max()
            : static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d))
      Bad(key, std::string("'") + key + "' must be an integer, got " + v.dump());
    x = d >= 9.2e18    ? std::numeric_limits<int64_t>::max()
        : d <= -9.2e18 ? std::numeric_limits<int64_t>::min()
                       : static_cast<int64_t>(d);
  } else {
    Bad(key, std::string("'") + key + "' must be an integer");
  }
  if (x < lo || x > hi)
    Bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
                 std::to_string(hi) + ", got " + v.dump());
  return x;
}

void Refuse(const std::string& param, const std::string& what) {
  Bad(param, what + " is not supported by this server");
}

std::string TextContent(const json& content, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) Bad(param, "'" + param + "' must be a string or an array of parts");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      Bad(param, "every part of '" + param + "' must be an object with a 'type'");
    if (part["type"] != "text")
      Bad(param, "'" + param + "' has a part of type " + part["type"].dump() +
                     ": this model accepts text only");
    if (!part.contains("text") || !part["text"].is_string())
      Bad(param, "a text part of '" + param + "' must have a string 'text'");
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant message's `tool_calls`: [{id, type: function, function: {name, arguments}}].
std::vector<ToolCall> ParseCalls(const json& calls, const std::string& param) {
  if (!calls.is_array()) Bad(param, "'" + param + "' must be an array");
  std::vector<ToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = param + "[" + std::to_string(i) + "]";
    const json& c = calls[i];
    if (!c.is_object() || !c.contains("id") || !c["id"].is_string() || !c.contains("function") ||
        !c["function"].is_object())
      Bad(at, "'" + at + "' must be {\"id\", \"type\": \"function\", \"function\": {...}}");
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      Bad(at + ".function.name", "'" + at + ".function.name' must be a string");
    if (!f.contains("arguments") || !f["arguments"].is_string())
      Bad(at + ".function.arguments", "'" + at + ".function.arguments' must be a JSON string");
    out.push_back({c["id"].get<std::string>(), f["name"].get<std::string>(),
                   f["arguments"].get<std::string>()});
  }
  return out;
}

void ParseMessages(const json& body, const ApiLimits& limits, ApiRequest& r) {
  if (!body.contains("messages")) Bad("messages", "'messages' is required");
  const json& messages = body["messages"];
  if (!messages.is_array()) Bad("messages", "'messages' must be an array");
  if (messages.empty()) Bad("messages", "'messages' must contain at least one message");
  if (messages.size() > limits.max_messages)
    Bad("messages",
        "'messages' has more than " + std::to_string(limits.max_messages) + " messages");
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) Bad(param, "'" + param + "' must be an object");
    if (!m.contains("role") || !m["role"].is_string())
      Bad(param + ".role", "'" + param + ".role' must be a string");
    std::string role = m["role"].get<std::string>();
    if (!kRoles.count(role))
      Bad(param + ".role", "'" + param +
                               ".role' must be one of system, developer, user, "
                               "assistant, tool; got " +
                               m["role"].dump());
    if (role == "developer") role = "system";
    if (!m.contains("content") && role != "assistant")
      Bad(param + ".content", "'" + param + ".content' is required");
    ChatTurn turn{role, TextContent(m.contains("content") ? m["content"] : json(), i), {}, ""};
    if (Present(m, "tool_calls")) {
      if (role != "assistant") Bad(param + ".tool_calls", "only assistant messages make tool calls");
      turn.tool_calls = ParseCalls(m["tool_calls"], param + ".tool_calls");
    }
    if (role == "tool") {
      if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
        Bad(param + ".tool_call_id", "'" + param + ".tool_call_id' must be a string");
      turn.tool_call_id = m["tool_call_id"].get<std::string>();
      // It answers a call an earlier assistant message made, and no other message has.
      bool called = false, answered = false;
      for (const ChatTurn& t : r.messages) {
        for (const ToolCall& c : t.tool_calls) called = called || c.id == turn.tool_call_id;
        answered = answered || (t.role == "tool" && t.tool_call_id == turn.tool_call_id);
      }
      if (!called || answered)
        Bad(param + ".tool_call_id",
            "'" + param + ".tool_call_id' " + json(turn.tool_call_id).dump() +
                (answered ? " was answered already" : " matches no earlier assistant tool call"));
    }
    r.messages.push_back(std::move(turn));
  }
}

// OpenAI's function names: letters, digits, '_' and '-', at most 64.
bool ValidFunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// `tools`, `tool_choice` and `parallel_tool_calls` (chat), from the body in its key order.
void ParseTools(const nlohmann::ordered_json& body, ApiRequest& r) {
  if (body.contains("tools") && !body["tools"].is_null()) {
    const auto& tools = body["tools"];
    if (!tools.is_array()) Bad("tools", "'tools' must be an array");
    if (tools.size() > 128) Bad("tools", "'tools' holds more than 128 functions");
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string param = "tools[" + std::to_string(i) + "]";
      const auto& t = tools[i];
      if (!t.is_object() || !t.contains("type") || t["type"] != "function" || !t.contains("function") ||
          !t["function"].is_object())
        Bad(param, "'" + param + "' must be {\"type\": \"function\", \"function\": {...}}");
      const auto& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string() ||
          !ValidFunctionName(f["name"].get<std::string>()))
        Bad(param + ".function.name", "'" + param +
                                          ".function.name' must be 1 to 64 letters, digits, "
                                          "'_' or '-'");
      if (!names.insert(f["name"].get<std::string>()).second)
        Bad(param + ".function.name", "two tools are named " + f["name"].dump());
      if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
        Bad(param + ".function.parameters", "'" + param + ".function.parameters' must be an object");
    }
    r.tools = tools;
  }
  const bool any = !r.tools.empty();
  if (any) r.tool_choice = "auto";
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const auto& c = body["tool_choice"];
    if (c.is_string()) {
      const std::string v = c.get<std::string>();
      if (v != "none" && v != "auto" && v != "required")
        Bad("tool_choice", "'tool_choice' must be none, auto, required or a function, got " + c.dump());
      r.tool_choice = v;
    } else if (c.is_object() && c.contains("type") && c["type"] == "function" && c.contains("function") &&
               c["function"].is_object() && c["function"].contains("name") &&
               c["function"]["name"].is_string()) {
      r.tool_choice = "function";
      r.tool_choice_name = c["function"]["name"].get<std::string>();
      bool known = false;
      for (const auto& t : r.tools) known = known || t["function"]["name"] == r.tool_choice_name;
      if (!known)
        Bad("tool_choice.function.name",
            "'tool_choice' names " + json(r.tool_choice_name).dump() + ", which is not in 'tools'");
    } else {
      Bad("tool_choice", "'tool_choice' must be a string or {\"type\": \"function\", "
                         "\"function\": {\"name\": ...}}");
    }
    if (!any && r.tool_choice != "none")
      Bad("tool_choice", "'tool_choice' " + c.dump() + " needs 'tools'");
  }
  if (!any) r.tool_choice = "none";
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null() &&
      !body["parallel_tool_calls"].is_boolean())
    Bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
}

void ParsePrompt(const json& body, const ApiLimits& limits, ApiRequest& r) {
  if (!body.contains("prompt")) Bad("prompt", "'prompt' is required");
  json prompt = body["prompt"];
  // A batch of one prompt is the prompt; several are refused (one choice per request).
  if (prompt.is_array() && !prompt.empty() && (prompt[0].is_string() || prompt[0].is_array())) {
    if (prompt.size() != 1) Refuse("prompt", "more than one prompt per request");
    prompt = json(prompt[0]);
  }
  if (prompt.is_string()) {
    r.prompt_text = prompt.get<std::string>();
    return;
  }
  if (!prompt.is_array())
    Bad("prompt",
        "'prompt' must be a string, an array of token ids, or an array of one of "
        "those");
  if (prompt.empty()) Bad("prompt", "'prompt' is empty");
  for (const json& id : prompt) {
    if (!id.is_number_integer())
      Bad("prompt", "a token-id 'prompt' must hold integers only, got " + id.dump());
    const int64_t v = id.is_number_unsigned() && id.get<uint64_t>() > (1ull << 62)
                          ? std::numeric_limits<int64_t>::max()
                          : id.get<int64_t>();
    if (v < 0 || v >= limits.vocab_size)
      Bad("prompt", "token id " + id.dump() + " is outside the vocabulary (" +
                        std::to_string(limits.vocab_size) + " tokens)");
    r.prompt_ids.push_back(static_cast<int32_t>(v));
  }
  r.prompt_is_ids = true;
}

void ParseStop(const json& body, const ApiLimits& limits, ApiRequest& r) {
  if (!Present(body, "stop")) return;
  const json& stop = body["stop"];
  std::vector<json> items;
  if (stop.is_string()) {
    items.push_back(stop);
  } else if (stop.is_array()) {
    if (stop.size() > limits.max_stop)
      Bad("stop", "'stop' has " + std::to_string(stop.size()) + " sequences; at most " +
                      std::to_string(limits.max_stop) + " are allowed");
    items.assign(stop.begin(), stop.end());
  } else {
    Bad("stop", "'stop' must be a string or an array of strings");
  }
  for (const json& s : items) {
    if (!s.is_string()) Bad("stop", "every 'stop' sequence must be a string");
    const std::string text = s.get<std::string>();
    if (text.empty()) Bad("stop", "a 'stop' sequence is empty");
    if (text.size() > limits.max_stop_bytes)
      Bad("stop",
          "a 'stop' sequence is longer than " + std::to_string(limits.max_stop_bytes) + " bytes");
    r.stop.push_back(text);
  }
}

// Chat: `logprobs` true, with `top_logprobs` alternatives (0..20); completions: `logprobs` N
// alternatives (0..5 in OpenAI's API; up to 20 here, as vLLM allows).
void ParseLogprobs(const json& body, Endpoint endpoint, ApiRequest& r) {
  constexpr int64_t kMaxTop = 20;
  if (endpoint == Endpoint::kChat) {
    const bool wanted = GetBool(body, "logprobs", false);
    if (Present(body, "top_logprobs") && !wanted)
      Bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (wanted) r.logprobs = static_cast<int>(GetInteger(body, "top_logprobs", 0, 0, kMaxTop));
  } else {
    if (Present(body, "top_logprobs"))
      Bad("top_logprobs", "'top_logprobs' is a chat field; completions take 'logprobs': N");
    if (Present(body, "logprobs"))
      r.logprobs = static_cast<int>(GetInteger(body, "logprobs", 0, 0, kMaxTop));
  }
}

// Fields OpenAI defines that change the output in ways moex does not implement.
// Sampling fields; absent ones stay unset (the model's defaults apply).
void ParseSampling(const json& body, ApiRequest& r) {
  auto number = [&](const char* key, double lo, double hi) -> std::optional<float> {
    if (!Present(body, key)) return std::nullopt;
    return static_cast<float>(GetNumber(body, key, 0.0, lo, hi));
  };
  r.temperature = number("temperature", 0.0, 2.0);
  r.top_p = number("top_p", 0.0, 1.0);
  if (r.top_p && *r.top_p <= 0.0f) Bad("top_p", "'top_p' must be greater than 0");
  if (Present(body, "top_k"))  // -1 is vLLM's and llama.cpp's "no limit".
    r.top_k = std::max<int>(0, static_cast<int>(GetInteger(body, "top_k", 0, -1, 1 << 30)));
  r.min_p = number("min_p", 0.0, 1.0);
  if (Present(body, "repetition_penalty") && Present(body, "repeat_penalty"))
    Bad("repeat_penalty", "give 'repetition_penalty' (vLLM) or 'repeat_penalty' (llama.cpp), "
                          "not both");
  if (Present(body, "repetition_penalty")) {
    r.repetition_penalty = number("repetition_penalty", 0.0, 10.0);
    r.repeat_last_n = -1;  // vLLM: the prompt and everything generated.
  } else if (Present(body, "repeat_penalty")) {
    r.repetition_penalty = number("repeat_penalty", 0.0, 10.0);
    r.repeat_last_n = 64;  // llama.cpp's default window.
  }
  if (r.repetition_penalty && *r.repetition_penalty <= 0.0f)
    Bad(Present(body, "repeat_penalty") ? "repeat_penalty" : "repetition_penalty",
        "the repetition penalty must be greater than 0");
  if (Present(body, "repeat_last_n"))
    r.repeat_last_n = static_cast<int>(GetInteger(body, "repeat_last_n", 64, -1, 1 << 30));
}

void RefuseUnsupported(const json& body, Endpoint endpoint) {
  for (const char* key : {"functions", "function_call", "audio", "prediction", "modalities"})
    if (Present(body, key)) Refuse(key, std::string("'") + key + "'");
  if (endpoint == Endpoint::kCompletion) {
    if (GetInteger(body, "best_of", 1, 1, 20) != 1) Refuse("best_of", "'best_of' other than 1");
    if (Present(body, "suffix")) {
      if (!body["suffix"].is_string()) Bad("suffix", "'suffix' must be a string");
      if (!body["suffix"].get<std::string>().empty()) Refuse("suffix", "'suffix'");
    }
  }
}

// OpenAI's logit_bias: {"token id": bias in -100..100}, at most 1024 entries.
void ParseLogitBias(const json& body, const ApiLimits& limits, ApiRequest& r) {
  if (!Present(body, "logit_bias")) return;
  const json& bias = body["logit_bias"];
  if (!bias.is_object()) Bad("logit_bias", "'logit_bias' must be an object");
  if (bias.size() > 1024) Bad("logit_bias", "'logit_bias' has more than 1024 entries");
  for (const auto& [key, value] : bias.items()) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id >= limits.vocab_size)
      Bad("logit_bias", "'logit_bias' key '" + key + "' is not a token id of the vocabulary");
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100 ||
        value.get<double>() > 100)
      Bad("logit_bias", "'logit_bias' values must be numbers from -100 to 100");
    r.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
}

// The fields that ask for structured output (OpenAI's, then llama.cpp's and vLLM's).
constexpr const char* kStructuredOutputKeys[] = {"response_format", "json_schema", "grammar",
                                                 "guided_json", "guided_regex", "guided_grammar"};

bool StructuredOutputAsked(const json& body) {
  for (const char* key : kStructuredOutputKeys)
    if (Present(body, key)) return true;
  return false;
}

// The grammar one of the structured-output fields asks for (null when none does). The
// schemas are read again from `ordered` (the body parsed keeping key order), so that objects
// are written with their properties in the schema's order, as OpenAI writes them.
void ParseStructuredOutput(const json& body, const nlohmann::ordered_json& ordered,
                           const ApiLimits& limits, ApiRequest& r) {
  std::vector<std::string> given;
  for (const char* key : kStructuredOutputKeys)
    if (Present(body, key)) given.push_back(key);
  if (given.empty()) return;
  // A schema's grammar: OpenAI's strict mode makes every property required; otherwise
  // `required` holds and undeclared properties are not written (as XGrammar and vLLM do).
  JsonSchemaOptions json_options;
  json_options.compact = limits.compact_json;
  auto schema_grammar = [&](const nlohmann::ordered_json& schema, const std::string& param,
                            bool strict) {
    if (!schema.is_object() && !schema.is_boolean())
      Bad(param, "'" + param + "' must be a JSON schema (an object)");
    JsonSchemaOptions options = json_options;
    options.strict = strict;
    options.additional_properties_default = false;
    try {
      return std::make_shared<const Grammar>(JsonSchemaGrammar(schema, options));
    } catch (const Error& e) {
      Bad(param, std::string("invalid '") + param + "': " + e.what());
    }
  };
  auto text_field = [&](const char* key) {
    if (!body[key].is_string()) Bad(key, std::string("'") + key + "' must be a string");
    return body[key].get<std::string>();
  };
  // response_format {"type": "text"} asks for nothing and may come with an extension.
  const bool plain_text = Present(body, "response_format") && body["response_format"].is_object() &&
                          body["response_format"].value("type", json()) == "text";
  if (given.size() - (plain_text ? 1 : 0) > 1)
    Bad(given[1], "give one of 'response_format', 'json_schema', 'grammar', 'guided_json', "
                  "'guided_regex' and 'guided_grammar', not several");
  const std::string key = plain_text && given.size() > 1 ? given[1] : given[0];
  r.grammar_source = key;
  try {
    if (key == "response_format") {
      const json& f = body["response_format"];
      if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
        Bad("response_format", "'response_format' must be an object with a string 'type'");
      const std::string type = f["type"].get<std::string>();
      if (type == "text") return;
      if (type == "json_object") {
        r.grammar = std::make_shared<const Grammar>(JsonObjectGrammar(json_options));
      } else if (type == "json_schema") {
        const auto& format = ordered.at("response_format");
        if (!format.contains("json_schema") || !format.at("json_schema").is_object())
          Bad("response_format.json_schema",
              "'response_format.json_schema' must be an object with a 'schema'");
        const auto& spec = format.at("json_schema");
        const bool strict = spec.contains("strict") && spec.at("strict").is_boolean() &&
                            spec.at("strict").get<bool>();
        if (spec.contains("strict") && !spec.at("strict").is_boolean() &&
            !spec.at("strict").is_null())
          Bad("response_format.json_schema.strict", "'strict' must be a boolean");
        if (!spec.contains("schema") || spec.at("schema").is_null()) {
          r.grammar = std::make_shared<const Grammar>(JsonObjectGrammar(json_options));
        } else {
          r.grammar =
              schema_grammar(spec.at("schema"), "response_format.json_schema.schema", strict);
        }
      } else {
        Bad("response_format.type", "'response_format.type' must be text, json_object or "
                                    "json_schema, not '" + type + "'");
      }
    } else if (key == "json_schema" || key == "guided_json") {
      nlohmann::ordered_json schema = ordered.at(key);
      // vLLM accepts the schema as a JSON string too.
      if (schema.is_string()) {
        const std::string text = schema.get<std::string>();
        try {
          CheckNesting(text);  // The body's own check did not see inside the string.
        } catch (const ApiError& e) {
          Bad(key, std::string("'") + key + "': " + e.what());
        }
        try {
          schema = nlohmann::ordered_json::parse(text);
        } catch (const nlohmann::ordered_json::exception&) {
          Bad(key, std::string("'") + key + "' is a string that is not JSON");
        }
      }
      r.grammar = schema_grammar(schema, key, false);
    } else if (key == "grammar" || key == "guided_grammar") {
      r.grammar = std::make_shared<const Grammar>(ParseGbnf(text_field(key.c_str())));
    } else {  // guided_regex
      r.grammar = std::make_shared<const Grammar>(RegexGrammar(text_field(key.c_str())));
    }
  } catch (const Error& e) {
    Bad(key, std::string("invalid '") + key + "': " + e.what());
  }
}

// Every argument OpenAI's two endpoints define plus the llama.cpp and vLLM extras moex honours
// (cache_prompt: moex always reuses cached prefixes); anything else is ignored and reported.
const std::set<std::string>& KnownKeys(Endpoint endpoint) {
  static const std::set<std::string> kCommon = {"model",
                                                "max_tokens",
                                                "temperature",
                                                "top_p",
                                                "top_k",
                                                "seed",
                                                "stop",
                                                "stream",
                                                "stream_options",
                                                "n",
                                                "logprobs",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "logit_bias",
                                                "user",
                                                "ignore_eos",
                                                "min_p",
                                                "repetition_penalty",
                                                "repeat_penalty",
                                                "repeat_last_n",
                                                "n_predict",
                                                "cache_prompt",
                                                "json_schema",
                                                "grammar",
                                                "guided_json",
                                                "guided_regex",
                                                "guided_grammar"};
  static const std::set<std::string> kChat = [] {
    std::set<std::string> s = kCommon;
    for (const char* k :
         {"messages", "max_completion_tokens", "top_logprobs", "tools", "functions", "tool_choice",
          "function_call", "response_format", "parallel_tool_calls", "metadata", "store",
          "service_tier", "audio", "prediction", "modalities", "reasoning_effort"})
      s.insert(k);
    return s;
  }();
  static const std::set<std::string> kCompletion = [] {
    std::set<std::string> s = kCommon;
    for (const char* k : {"prompt", "echo", "best_of", "suffix", "response_format"}) s.insert(k);
    return s;
  }();
  return endpoint == Endpoint::kChat ? kChat : kCompletion;
}

}  // namespace

ApiRequest ParseApiRequest(Endpoint endpoint, std::string_view text, const ApiLimits& limits) {
  CheckNesting(text);
  json body;
  try {
    body = json::parse(text);
  } catch (const json::exception& e) {
    Bad("", std::string("the request body is not valid JSON (") + e.what() + ")");
  }
  if (!body.is_object()) Bad("", "the request body must be a JSON object");
  const auto& known = KnownKeys(endpoint);
  ApiRequest r;
  const auto& other = KnownKeys(endpoint == Endpoint::kChat ? Endpoint::kCompletion : Endpoint::kChat);
  for (const auto& [key, value] : body.items()) {
    if (known.count(key)) continue;
    // The other endpoint's field is a body sent to the wrong URL, not an extra to skip.
    if (other.count(key))
      Bad(key, "'" + key + "' is a field of " +
                   (endpoint == Endpoint::kChat ? "/v1/completions" : "/v1/chat/completions") +
                   ", not of this endpoint");
    r.ignored_fields.push_back(key);
  }
  r.endpoint = endpoint;
  if (Present(body, "model")) {
    if (!body["model"].is_string()) Bad("model", "'model' must be a string");
    r.model = body["model"].get<std::string>();
  }
  if (endpoint == Endpoint::kChat) {
    ParseMessages(body, limits, r);
  } else {
    ParsePrompt(body, limits, r);
  }
  RefuseUnsupported(body, endpoint);

  const int64_t fallback = endpoint == Endpoint::kChat ? limits.default_max_tokens : 16;
  const char* max_key = endpoint == Endpoint::kChat && Present(body, "max_completion_tokens")
                            ? "max_completion_tokens"
                            : "max_tokens";
  // llama.cpp's n_predict means max_tokens; its -1 (no limit) takes the default.
  if (!Present(body, max_key) && Present(body, "n_predict") &&
      GetInteger(body, "n_predict", -1, -1, limits.context) != -1)
    max_key = "n_predict";
  r.max_tokens = static_cast<int>(
      GetInteger(body, max_key, std::min<int64_t>(fallback, limits.context), 1, limits.context));
  ParseSampling(body, r);
  if (Present(body, "seed"))
    r.seed = static_cast<uint64_t>(GetInteger(body, "seed", 0, std::numeric_limits<int64_t>::min(),
                                              std::numeric_limits<int64_t>::max()));
  ParseStop(body, limits, r);
  r.stream = GetBool(body, "stream", false);
  if (Present(body, "stream_options")) {
    const json& o = body["stream_options"];
    if (!o.is_object()) Bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) Bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    r.include_usage = GetBool(o, "include_usage", false);
  }
  r.ignore_eos = GetBool(body, "ignore_eos", false);
  GetBool(body, "cache_prompt", true);  // Checked only: prefixes are always reused.
  r.presence_penalty = static_cast<float>(GetNumber(body, "presence_penalty", 0.0, -2.0, 2.0));
  r.frequency_penalty = static_cast<float>(GetNumber(body, "frequency_penalty", 0.0, -2.0, 2.0));
  ParseLogitBias(body, limits, r);
  ParseLogprobs(body, endpoint, r);
  r.n = static_cast<int>(GetInteger(body, "n", 1, 1, limits.max_choices));
  if (endpoint == Endpoint::kCompletion) {
    r.echo = GetBool(body, "echo", false);
    // The prompt's own logprobs would need every prompt position's logits.
    if (r.echo && r.logprobs >= 0)
      Refuse("echo", "'echo' with 'logprobs' (the prompt's log probabilities)");
  }
  // Schemas (tools' parameters, structured output) keep the body's key order: their
  // properties are written in it. The body is parsed once more for them, only when asked.
  const bool tools = Present(body, "tools") || Present(body, "tool_choice");
  const bool structured = StructuredOutputAsked(body);
  const nlohmann::ordered_json ordered =
      tools || structured ? nlohmann::ordered_json::parse(text) : nlohmann::ordered_json();
  if (endpoint == Endpoint::kChat && tools) {
    ParseTools(ordered, r);
    if (r.tool_choice == "required" || r.tool_choice == "function") {
      if (structured)
        Bad("tool_choice", "'tool_choice' " + r.tool_choice +
                               " and a structured output format cannot be asked together");
    }
  } else if (tools) {
    Bad(Present(body, "tools") ? "tools" : "tool_choice", "tools are a chat field");
  }
  if (structured) ParseStructuredOutput(body, ordered, limits, r);
  return r;
}

std::string IgnoredFieldsWarning(const ApiRequest& r) {
  std::string names;
  for (const std::string& f : r.ignored_fields) {
    std::string clean;  // A quoted-string of printable ASCII: no quotes nor backslashes.
    for (const char c : f)
      if (c != '"' && c != '\\' && c >= 0x20 && c < 0x7f) clean += c;
    names += (names.empty() ? "" : ", ") + clean.substr(0, 64);
    if (names.size() > 1024) {
      names += ", ...";
      break;
    }
  }
  return "299 moex \"ignored unknown fields: " + names + "\"";
}

}  // namespace moex::serve

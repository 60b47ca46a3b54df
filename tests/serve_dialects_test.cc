// Anthropic's Messages API and OpenAI's Responses API, translated onto chat requests: each
// dialect's request becomes the chat body the OpenAI parser checks (hand-written cases), what
// cannot be honoured is a 400 naming the dialect's field, and replies render in each
// dialect's shape, whole and as stream events. End to end on a served model with a
// tool-calling template, both dialects run a tool loop and structured output.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "serve/api_error.h"
#include "serve/api_request.h"
#include "serve/messages_api.h"
#include "serve/responses_api.h"
#include "support/serve_fixtures.h"
#include "support/temp_dir.h"

namespace moex::serve {
namespace {

using nlohmann::json;

json Chat(const DialectRequest& r) {
  return json::parse(r.chat_body);
}

// The param of the ApiError `f` throws ("" when it throws none).
template <typename F>
std::string ParamOf(F f) {
  try {
    f();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    return e.param();
  }
  return "";
}

// The "data:" payloads of an event stream text, with their "event:" names checked.
std::vector<json> Events(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line, name;
  while (std::getline(in, line)) {
    if (line.rfind("event: ", 0) == 0) name = line.substr(7);
    if (line.rfind("data: ", 0) != 0) continue;
    out.push_back(json::parse(line.substr(6)));
    EXPECT_EQ(out.back()["type"], name) << line;
  }
  return out;
}

TEST(MessagesApi, TranslatesSystemBlocksToolsAndAToolLoop) {
  const DialectRequest r = TranslateMessagesRequest(R"({
    "model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
    "stop_sequences": ["END"], "temperature": 0.2, "top_k": 5, "metadata": {"user_id": "u"},
    "thinking": {"type": "enabled", "budget_tokens": 100},
    "tools": [{"name": "get_weather", "description": "Weather",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "tool_choice": {"type": "any"},
    "messages": [
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
        {"type": "text", "text": "And tomorrow?"}]}]})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.ignored, std::vector<std::string>{"thinking"});
  const json chat = Chat(r);
  EXPECT_EQ(chat["max_tokens"], 64);
  EXPECT_EQ(chat["stop"], json::array({"END"}));
  EXPECT_EQ(chat["top_k"], 5);
  EXPECT_EQ(chat["tool_choice"], "required");
  EXPECT_EQ(chat["tools"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(chat["tools"][0]["function"]["parameters"]["properties"]["city"]["type"], "string");
  const json& m = chat["messages"];
  ASSERT_EQ(m.size(), 5u) << m;
  EXPECT_EQ(m[0], json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(m[3], json({{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "sunny"}}));
  EXPECT_EQ(m[4], json({{"role", "user"}, {"content", "And tomorrow?"}}));
  // The OpenAI parser accepts what the translation made.
  const ApiRequest parsed = ParseApiRequest(Endpoint::kChat, r.chat_body, ApiLimits{});
  EXPECT_EQ(parsed.tool_choice, "required");
  EXPECT_EQ(parsed.messages.size(), 5u);
  // tool_choice by name, and none.
  EXPECT_EQ(Chat(TranslateMessagesRequest(
                R"({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}],
                    "tool_choice": {"type": "tool", "name": "f"}})"))["tool_choice"],
            json({{"type", "function"}, {"function", {{"name", "f"}}}}));
}

// Anthropic's structured outputs (output_config.format) become a JSON-schema response format.
TEST(MessagesApi, OutputConfigFormatIsAJsonSchemaReply) {
  const DialectRequest r = TranslateMessagesRequest(
      R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "output_config":
          {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object",
          "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}}}})");
  EXPECT_TRUE(r.ignored.empty());
  EXPECT_EQ(Chat(r)["response_format"]["type"], "json_schema");
  // The schema keeps its property order (b before a) on its way to the grammar.
  EXPECT_LT(r.chat_body.find("\"b\""), r.chat_body.find("\"a\""));
  EXPECT_NE(ParseApiRequest(Endpoint::kChat, r.chat_body, ApiLimits{}).grammar, nullptr);
  EXPECT_EQ(ParamOf([] {
              TranslateMessagesRequest(R"({"max_tokens": 8, "messages": [{"role": "user",
                "content": "x"}], "output_config": {"format": {"type": "yaml"}}})");
            }),
            "output_config.format");
}

TEST(MessagesApi, RefusalsNameTheAnthropicField) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(ParamOf([&] { TranslateMessagesRequest("{" + user + "}"); }), "max_tokens");
  EXPECT_EQ(ParamOf([] { TranslateMessagesRequest(R"({"max_tokens": 1, "messages": []})"); }),
            "messages");
  EXPECT_EQ(ParamOf([] {
              TranslateMessagesRequest(R"({"max_tokens": 1, "messages": [{"role": "system",
                                            "content": "x"}]})");
            }),
            "messages.0.role");
  EXPECT_EQ(ParamOf([] {
              TranslateMessagesRequest(R"({"max_tokens": 1, "messages": [{"role": "user",
                "content": [{"type": "image", "source": {"type": "base64", "data": ""}}]}]})");
            }),
            "messages.0.content.0.type");
  EXPECT_EQ(ParamOf([&] {
              TranslateMessagesRequest(R"({"max_tokens": 1, "tools": [{"type":
                "web_search_20250305", "name": "web_search"}], )" +
                                       user + "}");
            }),
            "tools.0.type");
  EXPECT_EQ(ParamOf([&] {
              TranslateMessagesRequest(R"({"max_tokens": 1, "tool_choice": {"type": "maybe"}, )" +
                                       user + "}");
            }),
            "tool_choice");
  EXPECT_EQ(ParamOf([] { TranslateMessagesRequest("[1]"); }), "");
  EXPECT_NE(ParamOf([] { TranslateMessagesRequest(std::string(100, '[')); }), "x");
  EXPECT_EQ(MessagesErrorBody(400, "bad")["error"]["type"], "invalid_request_error");
}

TEST(MessagesApi, RepliesAsAMessageAndAsStreamEvents) {
  ParsedReply reply;
  reply.content = "Let me check.";
  reply.calls.push_back({"", "get_weather", R"({"city": "Oslo"})"});
  DialectUsage usage{12, 7, 4};
  const json m = MessagesResponse("msg_1", "m", reply, "stop", usage, ToolCallFormat::kHermes);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 2u);
  EXPECT_EQ(m["content"][0], json({{"type", "text"}, {"text", "Let me check."}}));
  EXPECT_EQ(m["content"][1]["type"], "tool_use");
  EXPECT_EQ(m["content"][1]["input"], json({{"city", "Oslo"}}));
  EXPECT_EQ(m["content"][1]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(m["usage"]["input_tokens"], 12);
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(MessagesResponse("i", "m", ParsedReply{"x", {}}, "length", usage,
                             ToolCallFormat::kNone)["stop_reason"],
            "max_tokens");

  MessagesStream stream("msg_1", "m", ToolCallFormat::kHermes);
  // One call at a time: the operands of + are evaluated in no set order.
  std::string text = stream.Start(12);
  text += stream.Text("Let ");
  text += stream.Text("me check.");
  text += stream.Finish(ParsedReply{"", reply.calls}, "stop", usage);
  std::vector<std::string> types;
  for (const json& e : Events(text)) types.push_back(e["type"]);
  EXPECT_EQ(types,
            (std::vector<std::string>{
                "message_start", "ping", "content_block_start", "content_block_delta",
                "content_block_delta", "content_block_stop", "content_block_start",
                "content_block_delta", "content_block_stop", "message_delta", "message_stop"}));
  const std::vector<json> events = Events(text);
  EXPECT_EQ(events[0]["message"]["usage"]["input_tokens"], 12);
  EXPECT_EQ(events[6]["index"], 1);
  EXPECT_EQ(events[6]["content_block"]["name"], "get_weather");
  EXPECT_EQ(events[7]["delta"]["partial_json"], R"({"city": "Oslo"})");
  EXPECT_EQ(events[9]["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(events[9]["usage"]["output_tokens"], 7);
}

TEST(ResponsesApi, TranslatesInputItemsInstructionsToolsAndFormat) {
  const DialectRequest r = TranslateResponsesRequest(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 50, "store": true,
    "reasoning": {"effort": "low"},
    "tools": [{"type": "function", "name": "get_weather", "strict": true,
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "text": {"format": {"type": "json_schema", "name": "w", "strict": true,
             "schema": {"type": "object", "properties": {"t": {"type": "integer"}}}}},
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"role": "developer", "content": "Answer in JSON."}]})");
  EXPECT_EQ(r.ignored, std::vector<std::string>{"reasoning"});
  const json chat = Chat(r);
  EXPECT_EQ(chat["max_tokens"], 50);
  EXPECT_EQ(chat["tool_choice"],
            json({{"type", "function"}, {"function", {{"name", "get_weather"}}}}));
  EXPECT_EQ(chat["response_format"]["type"], "json_schema");
  EXPECT_EQ(chat["response_format"]["json_schema"]["name"], "w");
  const json& m = chat["messages"];
  ASSERT_EQ(m.size(), 5u) << m;
  EXPECT_EQ(m[0], json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[1]["content"], "Weather in Oslo?");
  // The call joins the assistant turn before it.
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[4], json({{"role", "system"}, {"content", "Answer in JSON."}}));
  // (A forced call and a structured reply are refused together, as on chat completions.)
  EXPECT_EQ(ParamOf([&] { ParseApiRequest(Endpoint::kChat, r.chat_body, ApiLimits{}); }),
            "tool_choice");
  json without_choice = chat;
  without_choice.erase("tool_choice");
  const ApiRequest parsed = ParseApiRequest(Endpoint::kChat, without_choice.dump(), ApiLimits{});
  EXPECT_NE(parsed.grammar, nullptr);
  EXPECT_EQ(parsed.messages.size(), 5u);
  EXPECT_EQ(r.echo["max_output_tokens"], 50);
  // A string input is one user message.
  EXPECT_EQ(Chat(TranslateResponsesRequest(R"({"input": "Hi"})"))["messages"],
            json::parse(R"([{"role": "user", "content": "Hi"}])"));
}

TEST(ResponsesApi, RefusalsNameTheResponsesField) {
  EXPECT_EQ(ParamOf([] { TranslateResponsesRequest(R"({"model": "m"})"); }), "input");
  EXPECT_EQ(ParamOf([] {
              TranslateResponsesRequest(R"({"input": "x", "previous_response_id": "resp_1"})");
            }),
            "previous_response_id");
  EXPECT_EQ(ParamOf([] {
              TranslateResponsesRequest(R"({"input": [{"role": "user", "content":
                [{"type": "input_image", "image_url": "http://x"}]}]})");
            }),
            "input.0.content.0.type");
  EXPECT_EQ(ParamOf([] {
              TranslateResponsesRequest(R"({"input": "x", "tools": [{"type": "web_search"}]})");
            }),
            "tools.0.type");
  EXPECT_EQ(ParamOf([] {
              TranslateResponsesRequest(R"({"input": [{"type": "item_reference", "id": "x"}]})");
            }),
            "input.0");
  EXPECT_EQ(ParamOf([] {
              TranslateResponsesRequest(R"({"input": "x", "text": {"format": {"type": "yaml"}}})");
            }),
            "text.format.type");
}

TEST(ResponsesApi, RepliesAsAResponseAndAsStreamEvents) {
  DialectRequest request;
  request.echo["max_output_tokens"] = 50;
  const json base = ResponsesBase("resp_1", 1700000000, "m", request);
  ParsedReply reply{"It is sunny.", {{"", "get_weather", R"({"city":"Oslo"})"}}};
  const DialectUsage usage{10, 5, 0};
  const json r = ResponsesResponse(base, reply, "stop", usage, ToolCallFormat::kHermes);
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["max_output_tokens"], 50);
  ASSERT_EQ(r["output"].size(), 2u);
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "It is sunny.");
  EXPECT_EQ(r["output"][1]["type"], "function_call");
  EXPECT_EQ(r["output"][1]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(r["usage"]["total_tokens"], 15);
  const json cut =
      ResponsesResponse(base, ParsedReply{"It", {}}, "length", usage, ToolCallFormat::kNone);
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");

  ResponsesStream stream(base, ToolCallFormat::kHermes);
  std::string text = stream.Start();
  text += stream.Text("It is ");
  text += stream.Finish(ParsedReply{"sunny.", reply.calls}, "stop", usage);
  const std::vector<json> events = Events(text);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    types.push_back(events[i]["type"]);
    EXPECT_EQ(events[i]["sequence_number"], i);
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta",
                       "response.output_text.delta", "response.output_text.done",
                       "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta",
                       "response.function_call_arguments.done", "response.output_item.done",
                       "response.completed"}));
  EXPECT_EQ(events[6]["text"], "It is sunny.");
  EXPECT_EQ(events.back()["response"]["output"].size(), 2u);
  EXPECT_EQ(events.back()["response"]["usage"]["output_tokens"], 5);
  // An empty reply still has its (empty) message.
  ResponsesStream empty(base, ToolCallFormat::kNone);
  std::string empty_text = empty.Start();
  empty_text += empty.Finish(ParsedReply{}, "stop", usage);
  const std::vector<json> none = Events(empty_text);
  EXPECT_EQ(none.back()["response"]["output"][0]["content"][0]["text"], "");
}

// End to end on a tiny model whose template renders tools as Qwen's: each dialect answers a
// forced tool call (valid arguments), the loop's next turn with the result, a JSON-schema
// reply (Responses) and its stream; a wrong model is a 404 in the dialect's error shape.
TEST(ServeDialects, ToolLoopAndStructuredOutputOverBothApis) {
  testing::TempDir dir;
  testing::RunningServer s(testing::ToolTemplateModel(dir.path()), testing::SmallBatchOptions());
  const json schema = json::parse(R"({"type": "object", "properties": {"city": {"enum":
      ["Oslo", "Paris"]}}, "required": ["city"]})");

  // Anthropic.
  json m = {{"max_tokens", 160},
            {"temperature", 0.7},
            {"seed", 5},
            {"tools", {{{"name", "get_weather"}, {"input_schema", schema}}}},
            {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}},
            {"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}}};
  HttpResult r = s.Post("/v1/messages", m);
  ASSERT_EQ(r.status, 200) << r.body;
  json msg = json::parse(r.body);
  EXPECT_EQ(msg["stop_reason"], "tool_use") << msg;
  const json use = msg["content"].back();
  ASSERT_EQ(use["type"], "tool_use") << msg;
  EXPECT_TRUE(use["input"]["city"] == "Oslo" || use["input"]["city"] == "Paris") << use;
  m["stream"] = true;
  r = s.Post("/v1/messages", m);
  ASSERT_EQ(r.status, 200);
  std::string partial;
  for (const std::string& e : r.events) {
    const json ev = json::parse(e);
    if (ev["type"] == "content_block_delta" && ev["delta"]["type"] == "input_json_delta")
      partial += ev["delta"]["partial_json"].get<std::string>();
  }
  EXPECT_EQ(json::parse(partial), use["input"]) << "same seed, same call";
  EXPECT_EQ(json::parse(r.events.back())["type"], "message_stop");
  m.erase("stream");
  m.erase("tool_choice");
  m["messages"].push_back({{"role", "assistant"}, {"content", json::array({use})}});
  const json result = {{"type", "tool_result"}, {"tool_use_id", use["id"]}, {"content", "sunny"}};
  m["messages"].push_back({{"role", "user"}, {"content", json::array({result})}});
  m["max_tokens"] = 4;
  EXPECT_EQ(s.Post("/v1/messages", m).status, 200);
  m["model"] = "other";
  r = s.Post("/v1/messages", m);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["type"], "error");

  // Responses.
  json q = {{"input", "Weather in Oslo?"},
            {"max_output_tokens", 160},
            {"temperature", 0.7},
            {"seed", 5},
            {"tools", {{{"type", "function"}, {"name", "get_weather"}, {"parameters", schema}}}},
            {"tool_choice", "required"}};
  r = s.Post("/v1/responses", q);
  ASSERT_EQ(r.status, 200) << r.body;
  json resp = json::parse(r.body);
  const json call = resp["output"].back();
  ASSERT_EQ(call["type"], "function_call") << resp;
  EXPECT_EQ(call["name"], "get_weather");
  const json args = json::parse(call["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"] == "Oslo" || args["city"] == "Paris") << args;
  json next = {
      {"input",
       {{{"role", "user"}, {"content", "Weather in Oslo?"}},
        call,
        {{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "sunny"}}}},
      {"max_output_tokens", 4},
      {"tools", q["tools"]}};
  EXPECT_EQ(s.Post("/v1/responses", next).status, 200) << s.Post("/v1/responses", next).body;
  json structured = {
      {"input", "Which city?"},
      {"max_output_tokens", 160},
      {"text", {{"format", {{"type", "json_schema"}, {"name", "c"}, {"schema", schema}}}}}};
  r = s.Post("/v1/responses", structured);
  ASSERT_EQ(r.status, 200) << r.body;
  resp = json::parse(r.body);
  ASSERT_EQ(resp["status"], "completed") << resp;
  const json city = json::parse(resp["output"][0]["content"][0]["text"].get<std::string>());
  EXPECT_TRUE(city["city"] == "Oslo" || city["city"] == "Paris") << city;
  structured["stream"] = true;
  r = s.Post("/v1/responses", structured);
  ASSERT_EQ(r.status, 200);
  const json last = json::parse(r.events.back());
  EXPECT_EQ(last["type"], "response.completed");
  EXPECT_NE(last["response"]["output"][0]["content"][0]["text"], "");
  q["previous_response_id"] = resp["id"];
  r = s.Post("/v1/responses", q);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "previous_response_id");
}

}  // namespace
}  // namespace moex::serve

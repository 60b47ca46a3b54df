// Structured output end to end on the demo model (a 50k-token byte-level vocabulary): replies
// to response_format json_schema, json_object, a GBNF `grammar` and a `guided_regex` are
// strings of their grammar, greedy and sampled, streamed or not; the JSON ones parse and
// satisfy the schema, with properties in the schema's order. Bad schemas are a 400 naming
// the field.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/server.h"
#include "support/serve_fixtures.h"
#include "support/shared_data.h"

namespace moex::serve {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using testing::RunningServer;

cli::ModelOptions Demo() {
  cli::ModelOptions m;
  m.model = (testing::SourceDir() / "models/olmoe-demo").string();
  return m;
}

json Chat(const std::string& content, int max_tokens, double temperature, int seed) {
  return {{"messages", {{{"role", "user"}, {"content", content}}}},
          {"max_tokens", max_tokens},
          {"temperature", temperature},
          {"seed", seed}};
}

// A schema whose every value is bounded, so that even a model that writes at random ends
// the object within the token budget.
const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "member": {"type": "boolean"},
    "role": {"enum": ["admin", "user", "guest"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
    "home": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
             "required": ["zip"], "additionalProperties": false}
  },
  "required": ["name", "age", "member", "role", "tags", "home"],
  "additionalProperties": false
})";

// The reply satisfies kSchema, keys in its order.
void ExpectValid(const std::string& text) {
  SCOPED_TRACE(text);
  ordered_json v;
  ASSERT_NO_THROW(v = ordered_json::parse(text));
  ASSERT_TRUE(v.is_object());
  std::vector<std::string> keys;
  for (const auto& [k, x] : v.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"name", "age", "member", "role", "tags", "home"}));
  ASSERT_TRUE(v["name"].is_string());
  // maxLength counts code points; the names here are short.
  EXPECT_LE(v["name"].get<std::string>().size(), 6u * 4);
  ASSERT_TRUE(v["age"].is_number_integer());
  EXPECT_GE(v["age"].get<int64_t>(), 0);
  EXPECT_LE(v["age"].get<int64_t>(), 120);
  EXPECT_TRUE(v["member"].is_boolean());
  ASSERT_TRUE(v["role"].is_string());
  const std::string role = v["role"].get<std::string>();
  EXPECT_TRUE(role == "admin" || role == "user" || role == "guest") << role;
  ASSERT_TRUE(v["tags"].is_array());
  EXPECT_LE(v["tags"].size(), 2u);
  for (const auto& t : v["tags"]) EXPECT_TRUE(t.is_string());
  ASSERT_TRUE(v["home"].is_object());
  EXPECT_EQ(v["home"].size(), 1u);
  ASSERT_TRUE(v["home"]["zip"].is_string());
  EXPECT_TRUE(std::regex_match(v["home"]["zip"].get<std::string>(), std::regex("[0-9]{5}")));
}

TEST(ServeStructuredOutput, JsonSchemaRepliesParseAndValidate) {
  RunningServer s(Demo(), ServerOptions{});
  for (int seed = 0; seed < 4; ++seed) {
    // A model that writes at random spends many tokens on the whitespace JSON allows.
    json body = Chat("Describe a user as JSON.", 1000, seed == 0 ? 0.0 : 1.0, seed);
    // The schema as text, so its key order (not nlohmann's sorted one) reaches the server.
    const std::string request =
        body.dump().substr(0, body.dump().size() - 1) +
        R"(,"response_format":{"type":"json_schema","json_schema":{"name":"user","strict":true,"schema":)" +
        std::string(kSchema) + "}}}";
    const HttpResult r = s.PostRaw("/v1/chat/completions", request);
    ASSERT_EQ(r.status, 200) << r.body;
    const json reply = json::parse(r.body);
    EXPECT_EQ(reply["choices"][0]["finish_reason"], "stop") << r.body;
    ExpectValid(reply["choices"][0]["message"]["content"].get<std::string>());
  }
}

TEST(ServeStructuredOutput, StreamedJsonObjectIsTheSameAsTheWholeReply) {
  RunningServer s(Demo(), ServerOptions{});
  json body = Chat("Reply with a JSON object.", 120, 0.0, 1);
  body["response_format"] = {{"type", "json_object"}};
  const HttpResult whole = s.Post("/v1/chat/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json reply = json::parse(whole.body);
  const std::string text = reply["choices"][0]["message"]["content"];
  if (reply["choices"][0]["finish_reason"] == "stop") {
    json v;
    ASSERT_NO_THROW(v = json::parse(text)) << text;
    EXPECT_TRUE(v.is_object()) << text;
  } else {  // Cut by max_tokens: still an object's start.
    EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(text.substr(0, 1), "{") << text;
  }
  body["stream"] = true;
  std::string streamed;
  const HttpResult r = s.Post("/v1/chat/completions", body, [&](const std::string& data) {
    if (data == "[DONE]") return true;
    const json chunk = json::parse(data);
    if (!chunk["choices"].empty() && chunk["choices"][0]["delta"].contains("content"))
      streamed += chunk["choices"][0]["delta"]["content"].get<std::string>();
    return true;
  });
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(streamed, text);
}

TEST(ServeStructuredOutput, GbnfGrammarAndRegexConstrainCompletions) {
  RunningServer s(Demo(), ServerOptions{});
  for (int seed = 0; seed < 3; ++seed) {
    const HttpResult g = s.Post("/v1/completions", {{"prompt", "Is the sky blue? Answer:"},
                                                    {"max_tokens", 8},
                                                    {"temperature", 1.0},
                                                    {"seed", seed},
                                                    {"grammar", R"(root ::= " yes" | " no")"}});
    ASSERT_EQ(g.status, 200) << g.body;
    const json reply = json::parse(g.body);
    const std::string text = reply["choices"][0]["text"];
    EXPECT_TRUE(text == " yes" || text == " no") << text;
    EXPECT_EQ(reply["choices"][0]["finish_reason"], "stop");
  }
  const HttpResult r = s.Post("/v1/completions", {{"prompt", "A date:"},
                                                  {"max_tokens", 16},
                                                  {"temperature", 1.0},
                                                  {"seed", 3},
                                                  {"guided_regex", " 20[0-9]{2}-[01][0-9]-[0-3][0-9]"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string date = json::parse(r.body)["choices"][0]["text"];
  EXPECT_TRUE(std::regex_match(date, std::regex(" 20[0-9]{2}-[01][0-9]-[0-3][0-9]"))) << date;
}

TEST(ServeStructuredOutput, BadSchemasAreA400NamingTheField) {
  RunningServer s(Demo(), ServerOptions{});
  struct Bad {
    json format;
    std::string param;
  };
  const std::vector<Bad> cases = {
      {{{"type", "json_schema"},
        {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}, {"not", json::object()}}}}}},
       "response_format.json_schema.schema"},
      {{{"type", "json_schema"}, {"json_schema", "nope"}}, "response_format.json_schema"},
      {{{"type", "xml"}}, "response_format.type"},
      {"json", "response_format"},
  };
  for (const Bad& c : cases) {
    json body = Chat("hi", 8, 0, 0);
    body["response_format"] = c.format;
    const HttpResult r = s.Post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << c.format.dump();
    EXPECT_EQ(json::parse(r.body)["error"]["param"], c.param) << r.body;
  }
  json two = Chat("hi", 8, 0, 0);
  two["response_format"] = {{"type", "json_object"}};
  two["grammar"] = "root ::= \"a\"";
  const HttpResult r = s.Post("/v1/chat/completions", two);
  EXPECT_EQ(r.status, 400);
  const HttpResult gbnf = s.Post("/v1/completions", {{"prompt", "x"}, {"grammar", "root ::= ("}});
  EXPECT_EQ(gbnf.status, 400);
  EXPECT_EQ(json::parse(gbnf.body)["error"]["param"], "grammar");
  EXPECT_NE(json::parse(gbnf.body)["error"]["message"].get<std::string>().find("line 1"),
            std::string::npos)
      << gbnf.body;
}

}  // namespace
}  // namespace moex::serve

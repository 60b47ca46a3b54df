// The request parser of the OpenAI API: defaults, every accepted form, and a 400 naming the
// field for each malformed body, wrong type, absurd value or unsupported feature.
#include <gtest/gtest.h>

#include <string>

#include "serve/api_error.h"
#include "serve/api_request.h"
#include "text/grammar_matcher.h"
#include "serve/stop_text.h"

namespace moex::serve {
namespace {

ApiLimits Limits() {
  ApiLimits l;
  l.context = 128;
  l.vocab_size = 1000;
  l.default_max_tokens = 50;
  return l;
}

ApiRequest Chat(const std::string& body) {
  return ParseApiRequest(Endpoint::kChat, body, Limits());
}
ApiRequest Completion(const std::string& body) {
  return ParseApiRequest(Endpoint::kCompletion, body, Limits());
}

TEST(ServeApiRequest, ChatDefaultsFollowOpenAi) {
  const ApiRequest r = Chat(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_EQ(r.max_tokens, 50);  // The server's default for chat.
  // Unset sampling takes the model's defaults (generation_config.json), as vLLM does.
  EXPECT_FALSE(r.temperature.has_value());
  EXPECT_FALSE(r.top_p.has_value());
  EXPECT_FALSE(r.top_k.has_value());
  EXPECT_FALSE(r.min_p.has_value());
  EXPECT_FALSE(r.repetition_penalty.has_value());
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_TRUE(r.ignored_fields.empty());
  EXPECT_FALSE(r.stream);
}

TEST(ServeApiRequest, LlamaCppAndVllmExtrasMeanWhatTheyMeanThere) {
  const std::string msg = R"("messages":[{"role":"user","content":"hi"}])";
  ApiRequest r = Chat("{" + msg + R"(,"min_p":0.05,"repeat_penalty":1.1,"top_k":-1,
                      "n_predict":9,"cache_prompt":true})");
  EXPECT_FLOAT_EQ(*r.min_p, 0.05f);
  EXPECT_FLOAT_EQ(*r.repetition_penalty, 1.1f);
  EXPECT_EQ(*r.repeat_last_n, 64);  // llama.cpp's window.
  EXPECT_EQ(*r.top_k, 0);           // -1: no limit.
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_TRUE(r.ignored_fields.empty());
  r = Chat("{" + msg + R"(,"repetition_penalty":1.2,"n_predict":-1})");
  EXPECT_FLOAT_EQ(*r.repetition_penalty, 1.2f);
  EXPECT_EQ(*r.repeat_last_n, -1);  // vLLM: the whole context.
  EXPECT_EQ(r.max_tokens, 50);      // n_predict -1: the default.
  r = Chat("{" + msg + R"(,"repeat_penalty":1.1,"repeat_last_n":8,"max_tokens":3,"n_predict":7})");
  EXPECT_EQ(*r.repeat_last_n, 8);
  EXPECT_EQ(r.max_tokens, 3);  // max_tokens wins.
}

TEST(ServeApiRequest, UnknownFieldsAreIgnoredAndListed) {
  const ApiRequest r = Completion(
      R"({"prompt":"a","mirostat":2,"typical_p":0.9,"samplers":["top_k"],"id_slot":1})");
  EXPECT_EQ(r.prompt_text, "a");
  EXPECT_EQ(r.ignored_fields,
            (std::vector<std::string>{"id_slot", "mirostat", "samplers", "typical_p"}));
  // A known field keeps its checks.
  EXPECT_THROW(Completion(R"({"prompt":"a","mirostat":2,"min_p":3})"), ApiError);
}

TEST(ServeApiRequest, CompletionDefaultsTo16Tokens) {
  const ApiRequest r = Completion(R"({"prompt":"abc"})");
  EXPECT_EQ(r.prompt_text, "abc");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_EQ(r.max_tokens, 16);
}

TEST(ServeApiRequest, LogprobsAsEachEndpointSpellsThem) {
  const std::string msg = R"("messages":[{"role":"user","content":"hi"}])";
  EXPECT_EQ(Chat("{" + msg + "}").logprobs, -1);
  EXPECT_EQ(Chat("{" + msg + R"(,"logprobs":false})").logprobs, -1);
  EXPECT_EQ(Chat("{" + msg + R"(,"logprobs":true})").logprobs, 0);
  EXPECT_EQ(Chat("{" + msg + R"(,"logprobs":true,"top_logprobs":20})").logprobs, 20);
  EXPECT_EQ(Completion(R"({"prompt":"a"})").logprobs, -1);
  EXPECT_EQ(Completion(R"({"prompt":"a","logprobs":null})").logprobs, -1);
  EXPECT_EQ(Completion(R"({"prompt":"a","logprobs":0})").logprobs, 0);
  EXPECT_EQ(Completion(R"({"prompt":"a","logprobs":5})").logprobs, 5);
}

TEST(ServeApiRequest, ToolsAndTheirRoundTrip) {
  const ApiRequest r = Chat(R"({"messages":[
      {"role":"user","content":"weather?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get","arguments":"{\"city\":\"Oslo\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"sunny"}],
    "tools":[{"type":"function","function":{"name":"get","parameters":{"type":"object",
      "properties":{"z":{},"a":{}}}}}],
    "tool_choice":{"type":"function","function":{"name":"get"}},"parallel_tool_calls":false})");
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r.tool_choice, "function");
  EXPECT_EQ(r.tool_choice_name, "get");
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"].begin().key(), "z")
      << "the request's key order";
  EXPECT_EQ(Chat(R"({"messages":[{"role":"user","content":"x"}]})").tool_choice, "none");
  EXPECT_EQ(Chat(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function",)"
                 R"("function":{"name":"f"}}]})")
                .tool_choice,
            "auto");
}

TEST(ServeApiRequest, ChoicesAndEcho) {
  EXPECT_EQ(Completion(R"({"prompt":"a"})").n, 1);
  EXPECT_EQ(Completion(R"({"prompt":"a","n":3})").n, 3);
  EXPECT_FALSE(Completion(R"({"prompt":"a"})").echo);
  EXPECT_TRUE(Completion(R"({"prompt":"a","echo":true})").echo);
  ApiLimits few = Limits();
  few.max_choices = 4;
  EXPECT_THROW(ParseApiRequest(Endpoint::kCompletion, R"({"prompt":"a","n":5})", few), ApiError);
}

TEST(ServeApiRequest, ReadsEverySupportedField) {
  const ApiRequest r = Chat(
      R"({"messages":[{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
          {"role":"user","content":"q"},{"role":"assistant","content":null}],
          "max_completion_tokens":7,"temperature":0,"top_p":0.5,"top_k":3,"seed":-5,
          "stop":["x","yz"],"stream":true,"stream_options":{"include_usage":true},
          "n":1,"presence_penalty":0,"logit_bias":{},"user":"u","ignore_eos":true,
          "response_format":{"type":"text"}})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer is the system role.
  EXPECT_EQ(r.messages[0].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(*r.temperature, 0.0f);
  EXPECT_EQ(*r.top_p, 0.5f);
  EXPECT_EQ(*r.top_k, 3);
  ASSERT_TRUE(r.seed.has_value());
  EXPECT_EQ(*r.seed, static_cast<uint64_t>(-5));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.ignore_eos);
}

TEST(ServeApiRequest, ReadsPenaltiesAndLogitBias) {
  const ApiRequest r = Chat(
      R"({"messages":[{"role":"user","content":"q"}],"presence_penalty":0.5,
          "frequency_penalty":-1,"logit_bias":{"7":-100,"42":2.5}})");
  EXPECT_EQ(r.presence_penalty, 0.5f);
  EXPECT_EQ(r.frequency_penalty, -1.0f);
  EXPECT_EQ(r.logit_bias, (std::vector<std::pair<int32_t, float>>{{42, 2.5f}, {7, -100.0f}}));
}

// The grammar each structured-output field gives: checked on strings it must and must not
// accept (keys in the schema's order, not the sorted order nlohmann::json keeps).
TEST(ServeApiRequest, StructuredOutputFieldsGiveTheirGrammar) {
  auto accepts = [](const ApiRequest& r, std::string_view text) {
    GrammarMatcher m(r.grammar, nullptr);
    return m.AcceptBytes(text) && m.IsComplete();
  };
  const ApiRequest schema = Chat(
      R"({"messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_schema",
          "json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":
          {"z":{"type":"integer"},"a":{"enum":["x","y"]}}}}}})");
  ASSERT_NE(schema.grammar, nullptr);
  EXPECT_EQ(schema.grammar_source, "response_format");
  EXPECT_TRUE(accepts(schema, R"({"z": 3, "a": "y"})"));
  EXPECT_FALSE(accepts(schema, R"({"a": "y", "z": 3})"));  // Schema order.
  EXPECT_FALSE(accepts(schema, R"({"z": 3})"));            // Strict: every property.
  EXPECT_FALSE(accepts(schema, R"({"z": 3, "a": "q"})"));

  // Not strict: `required` holds, undeclared properties are not written.
  const ApiRequest loose = Chat(
      R"({"messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_schema",
          "json_schema":{"name":"p","schema":{"type":"object","properties":
          {"z":{"type":"integer"},"a":{"type":"boolean"}},"required":["a"]}}}})");
  EXPECT_TRUE(accepts(loose, R"({"a": true})"));
  EXPECT_TRUE(accepts(loose, R"({"z": 1, "a": false})"));
  EXPECT_FALSE(accepts(loose, R"({"a": true, "b": 1})"));

  const ApiRequest object =
      Chat(R"({"messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_object"}})");
  EXPECT_TRUE(accepts(object, R"({"any": [1, {"b": null}]})"));
  EXPECT_FALSE(accepts(object, "[1]"));

  const ApiRequest text =
      Chat(R"({"messages":[{"role":"user","content":"q"}],"response_format":{"type":"text"}})");
  EXPECT_EQ(text.grammar, nullptr);

  const ApiRequest gbnf = Completion(R"({"prompt":"a","grammar":"root ::= \"yes\" | \"no\""})");
  EXPECT_TRUE(accepts(gbnf, "no"));
  EXPECT_FALSE(accepts(gbnf, "maybe"));
  const ApiRequest regex = Completion(R"({"prompt":"a","guided_regex":"[0-9]{3}"})");
  EXPECT_TRUE(accepts(regex, "042"));
  EXPECT_FALSE(accepts(regex, "42"));
  // vLLM's guided_json may be a string holding the schema; llama.cpp's json_schema an object.
  const ApiRequest guided = Completion(R"({"prompt":"a","guided_json":"{\"type\":\"boolean\"}"})");
  EXPECT_TRUE(accepts(guided, "false"));
  const ApiRequest llama = Completion(R"({"prompt":"a","json_schema":{"type":"integer"}})");
  EXPECT_TRUE(accepts(llama, "-12"));
  EXPECT_FALSE(accepts(llama, "1.5"));
}

TEST(ServeApiRequest, TokenIdPromptsInEveryForm) {
  EXPECT_EQ(Completion(R"({"prompt":[1,2,999]})").prompt_ids, (std::vector<int32_t>{1, 2, 999}));
  EXPECT_TRUE(Completion(R"({"prompt":[[4,5]]})").prompt_is_ids);
  EXPECT_EQ(Completion(R"({"prompt":["one"]})").prompt_text, "one");
  EXPECT_EQ(Completion(R"({"prompt":"s","stop":"end"})").stop, std::vector<std::string>{"end"});
  EXPECT_EQ(Completion(R"({"prompt":"s","max_tokens":3.0})").max_tokens, 3);
}

struct BadCase {
  Endpoint endpoint;
  std::string body;
  std::string param;  // The field the error names.
};

class ServeApiRequestBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(ServeApiRequestBad, IsA400NamingTheField) {
  const BadCase& c = GetParam();
  try {
    ParseApiRequest(c.endpoint, c.body, Limits());
    FAIL() << "accepted: " << c.body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body << ": " << e.what();
    EXPECT_FALSE(std::string(e.what()).empty());
    const auto body = e.Body();
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
    EXPECT_EQ(body["error"]["message"], e.what());
  }
}

const Endpoint kC = Endpoint::kChat;
const Endpoint kP = Endpoint::kCompletion;
const std::string kMsg = R"("messages":[{"role":"user","content":"hi"}])";

INSTANTIATE_TEST_SUITE_P(
    Cases, ServeApiRequestBad,
    ::testing::Values(
        BadCase{kC, "", ""}, BadCase{kC, "{", ""}, BadCase{kC, "[]", ""},
        BadCase{kC, "\"text\"", ""}, BadCase{kC, std::string(100, '[') + std::string(100, ']'), ""},
        BadCase{kC, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", ""},
        BadCase{kC, R"({})", "messages"}, BadCase{kC, R"({"messages":[]})", "messages"},
        BadCase{kC, R"({"messages":"hi"})", "messages"},
        BadCase{kC, R"({"messages":[5]})", "messages[0]"},
        BadCase{kC, R"({"messages":[{"content":"x"}]})", "messages[0].role"},
        BadCase{kC, R"({"messages":[{"role":"king","content":"x"}]})", "messages[0].role"},
        BadCase{kC, R"({"messages":[{"role":"user"}]})", "messages[0].content"},
        BadCase{kC, R"({"messages":[{"role":"user","content":7}]})", "messages[0].content"},
        BadCase{kC, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
                "messages[0].content"},
        BadCase{kC, "{" + kMsg + R"(,"max_tokens":-1})", "max_tokens"},
        BadCase{kC, "{" + kMsg + R"(,"max_tokens":0})", "max_tokens"},
        BadCase{kC, "{" + kMsg + R"(,"max_tokens":1000000000000})", "max_tokens"},
        BadCase{kC, "{" + kMsg + R"(,"max_tokens":129})", "max_tokens"},
        BadCase{kC, "{" + kMsg + R"(,"max_tokens":"5"})", "max_tokens"},
        BadCase{kC, "{" + kMsg + R"(,"max_tokens":2.5})", "max_tokens"},
        BadCase{kC, "{" + kMsg + R"(,"temperature":3})", "temperature"},
        BadCase{kC, "{" + kMsg + R"(,"temperature":true})", "temperature"},
        BadCase{kC, "{" + kMsg + R"(,"top_p":0})", "top_p"},
        BadCase{kC, "{" + kMsg + R"(,"top_k":-2})", "top_k"},
        BadCase{kC, "{" + kMsg + R"(,"min_p":1.5})", "min_p"},
        BadCase{kC, "{" + kMsg + R"(,"min_p":"x"})", "min_p"},
        BadCase{kC, "{" + kMsg + R"(,"repeat_penalty":0})", "repeat_penalty"},
        BadCase{kC, "{" + kMsg + R"(,"repetition_penalty":1.1,"repeat_penalty":1.1})",
                "repeat_penalty"},
        BadCase{kC, "{" + kMsg + R"(,"repeat_last_n":-5})", "repeat_last_n"},
        BadCase{kC, "{" + kMsg + R"(,"n_predict":"x"})", "n_predict"},
        BadCase{kC, "{" + kMsg + R"(,"cache_prompt":3})", "cache_prompt"},
        BadCase{kC, "{" + kMsg + R"(,"seed":"x"})", "seed"},
        BadCase{kC, "{" + kMsg + R"(,"stream":1})", "stream"},
        BadCase{kC, "{" + kMsg + R"(,"stream_options":{"include_usage":true}})", "stream_options"},
        BadCase{kC, "{" + kMsg + R"(,"stop":["a","b","c","d","e"]})", "stop"},
        BadCase{kC, "{" + kMsg + R"(,"stop":[""]})", "stop"},
        BadCase{kC, "{" + kMsg + R"(,"stop":[1]})", "stop"},
        BadCase{kC, "{" + kMsg + R"(,"stop":")" + std::string(300, 'x') + "\"}", "stop"},
        BadCase{kC, "{" + kMsg + R"(,"n":0})", "n"},
        BadCase{kC, "{" + kMsg + R"(,"n":129})", "n"},
        BadCase{kC, "{" + kMsg + R"(,"logprobs":1})", "logprobs"},
        BadCase{kC, "{" + kMsg + R"(,"top_logprobs":2})", "top_logprobs"},
        BadCase{kC, "{" + kMsg + R"(,"logprobs":true,"top_logprobs":21})", "top_logprobs"},
        BadCase{kC, "{" + kMsg + R"(,"frequency_penalty":2.5})", "frequency_penalty"},
        BadCase{kC, "{" + kMsg + R"(,"presence_penalty":"1"})", "presence_penalty"},
        BadCase{kC, "{" + kMsg + R"(,"logit_bias":{"x":1}})", "logit_bias"},
        BadCase{kC, "{" + kMsg + R"(,"logit_bias":{"5":101}})", "logit_bias"},
        BadCase{kC, "{" + kMsg + R"(,"logit_bias":{"1000":1}})", "logit_bias"},
        BadCase{kC, "{" + kMsg + R"(,"logit_bias":{"-1":1}})", "logit_bias"},
        BadCase{kC, "{" + kMsg + R"(,"logit_bias":[1]})", "logit_bias"},
        BadCase{kC, "{" + kMsg + R"(,"tools":{}})", "tools"},
        BadCase{kC, "{" + kMsg + R"(,"tools":[{"type":"function","function":{"name":"a b"}}]})",
                "tools[0].function.name"},
        BadCase{kC, "{" + kMsg + R"(,"tools":[{"type":"function","function":{"name":"f"}},)" +
                    R"({"type":"function","function":{"name":"f"}}]})",
                "tools[1].function.name"},
        BadCase{kC, "{" + kMsg + R"(,"tool_choice":"required"})", "tool_choice"},
        BadCase{kC, "{" + kMsg + R"(,"tools":[{"type":"function","function":{"name":"f"}}],)" +
                    R"("tool_choice":{"type":"function","function":{"name":"g"}}})",
                "tool_choice.function.name"},
        BadCase{kC, "{" + kMsg + R"(,"tools":[{"type":"function","function":{"name":"f"}}],)" +
                    R"("tool_choice":"sometimes"})",
                "tool_choice"},
        BadCase{kC,
                R"({"messages":[{"role":"user","content":"hi"},{"role":"tool","content":"x",)"
                R"("tool_call_id":"call_1"}]})",
                "messages[1].tool_call_id"},
        BadCase{kC,
                R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":)"
                R"([{"id":"call_1","type":"function","function":{"name":"f","arguments":{}}}]}]})",
                "messages[1].tool_calls[0].function.arguments"},
        BadCase{kC, "{" + kMsg + R"(,"response_format":{"type":"xml"}})",
                "response_format.type"},
        BadCase{kC, "{" + kMsg + R"(,"response_format":"json"})", "response_format"},
        BadCase{kC, "{" + kMsg + R"(,"response_format":{"type":"json_schema"}})",
                "response_format.json_schema"},
        BadCase{kC,
                "{" + kMsg +
                    R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","not":{}}}}})",
                "response_format.json_schema.schema"},
        BadCase{kC, "{" + kMsg + R"(,"json_schema":{"type":"string","format":"hostname"}})",
                "json_schema"},
        BadCase{kC, "{" + kMsg + R"(,"grammar":"root ::= ("})", "grammar"},
        BadCase{kC, "{" + kMsg + R"(,"grammar":5})", "grammar"},
        BadCase{kC, "{" + kMsg + R"(,"guided_regex":"(a"})", "guided_regex"},
        BadCase{kC, "{" + kMsg + R"(,"guided_json":"{not json"})", "guided_json"},
        BadCase{kC, "{" + kMsg + R"(,"guided_json":")" + std::string(100000, '[') + "\"}",
                "guided_json"},
        BadCase{kC, "{" + kMsg + R"(,"grammar":"root ::= \"a\"","guided_regex":"a"})",
                "guided_regex"},
        BadCase{kC, "{" + kMsg + R"(,"model":5})", "model"},
        BadCase{kC, "{" + kMsg + R"(,"prompt":"x"})", "prompt"},
        BadCase{kP, R"({})", "prompt"}, BadCase{kP, R"({"prompt":5})", "prompt"},
        BadCase{kP, R"({"prompt":[]})", "prompt"}, BadCase{kP, R"({"prompt":[1,"a"]})", "prompt"},
        BadCase{kP, R"({"prompt":[1,1000]})", "prompt"},
        BadCase{kP, R"({"prompt":[-1]})", "prompt"},
        BadCase{kP, R"({"prompt":["a","b"]})", "prompt"},
        BadCase{kP, R"({"prompt":"a","echo":true,"logprobs":1})", "echo"},
        BadCase{kP, R"({"prompt":"a","echo":1})", "echo"},
        BadCase{kP, R"({"prompt":"a","best_of":2})", "best_of"},
        BadCase{kP, R"({"prompt":"a","suffix":"z"})", "suffix"},
        BadCase{kP, R"({"prompt":"a","logprobs":21})", "logprobs"},
        BadCase{kP, R"({"prompt":"a","logprobs":true})", "logprobs"},
        BadCase{kP, R"({"prompt":"a","top_logprobs":2})", "top_logprobs"},
        BadCase{kP, R"({"prompt":"a","messages":[]})", "messages"}));

TEST(ServeStopText, HoldsBackAPossibleStopAndCutsAtIt) {
  StopText s({"END", "xy"});
  EXPECT_EQ(s.Push("abc E"), "abc ");  // "E" may start END.
  EXPECT_EQ(s.Push("N"), "");
  EXPECT_EQ(s.Push("x"), "EN");  // "ENx" is no stop; "x" may start "xy".
  EXPECT_EQ(s.Push("Dz"), "xDz");
  EXPECT_EQ(s.Push("qEND tail"), "q");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.Push("more"), "");
  EXPECT_EQ(s.Flush(), "");
}

TEST(ServeStopText, FlushReturnsHeldTextWhenNoStopCame) {
  StopText s({"stop"});
  EXPECT_EQ(s.Push("a st"), "a ");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.Flush(), "st");
}

TEST(ServeStopText, EarliestStopWinsAcrossSequences) {
  StopText s({"cd", "b"});
  EXPECT_EQ(s.Push("abcd"), "a");
  EXPECT_TRUE(s.stopped());
}

}  // namespace
}  // namespace moex::serve

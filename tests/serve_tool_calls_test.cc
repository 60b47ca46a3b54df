// Tool calling's text side: which format a template asks for, a reply split into content and
// calls (whole and streamed), and the grammar that forces a valid call. Hand-made cases.
#include "serve/tool_calls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "support/shared_data.h"
#include "text/grammar_matcher.h"

namespace moex::serve {
namespace {

using nlohmann::ordered_json;

// Expects `r` to hold `content` and exactly `calls` ({name, arguments}) in order.
void ExpectReply(const ParsedReply& r, const std::string& content,
                 const std::vector<std::pair<std::string, std::string>>& calls) {
  EXPECT_EQ(r.content, content);
  ASSERT_EQ(r.calls.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(r.calls[i].name, calls[i].first);
    EXPECT_EQ(r.calls[i].arguments, calls[i].second);
  }
}

bool Matches(const Grammar& g, const std::string& text) {
  GrammarMatcher m(std::make_shared<Grammar>(g), nullptr);
  return m.AcceptBytes(text) && m.IsComplete();
}

constexpr const char* kQwenLike =
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    "{{ c.function | tojson }}\n</tool_call>{% endfor %}{% endif %}{% endfor %}";

TEST(ToolCalls, TheFormatComesFromTheTemplate) {
  EXPECT_EQ(DetectToolCallFormat(kQwenLike), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat("{% for m in messages %}{{ m.content }}{% endfor %}"),
            ToolCallFormat::kNone);
  EXPECT_EQ(DetectToolCallFormat("{{ tools }}[TOOL_CALLS]"), ToolCallFormat::kMistral);
  // DeepSeek V3 / R1 (a fenced JSON after the name) and V3.1 (the JSON right after the
  // separator); neither renders the tool list.
  const std::string v3 =
      "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
      "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n```json\\n' + "
      "tool['function']['arguments'] + '\\n```<｜tool▁call▁end｜>'}}";
  EXPECT_EQ(DetectToolCallFormat(v3), ToolCallFormat::kDeepSeekV3);
  EXPECT_FALSE(TemplateRendersTools(v3));
  const std::string v31 =
      "{{'<｜tool▁call▁begin｜>' + tool['function']['name'] + "
      "'<｜tool▁sep｜>' + tool['function']['arguments'] | tojson}}";
  EXPECT_EQ(DetectToolCallFormat(v31), ToolCallFormat::kDeepSeekV31);
  EXPECT_TRUE(ArgumentsAsText(ToolCallFormat::kDeepSeekV3));
  EXPECT_FALSE(ArgumentsAsText(ToolCallFormat::kDeepSeekV31));
  // GLM writes <tool_call> too, but with <arg_key> pairs.
  EXPECT_EQ(DetectToolCallFormat("{% if tools %}{% endif %}<tool_call>{{ tc.name }}"
                                 "<arg_key>{{ k }}</arg_key>"),
            ToolCallFormat::kGlm);
  EXPECT_TRUE(TemplateRendersTools(kQwenLike));
}

// The DeepSeek V3 template of ../shared/data (from the model's tokenizer_config.json).
TEST(ToolCalls, DeepSeekV3sOwnTemplateIsDetected) {
  const auto path = testing::SharedDataDir() / "tokenizers/deepseek_v3.tokenizer_config.json";
  if (!std::filesystem::exists(path)) MOEX_SKIP_WITHOUT_SHARED_DATA(path.string());
  const std::string source =
      nlohmann::json::parse(testing::ReadFile(path))["chat_template"].get<std::string>();
  EXPECT_EQ(DetectToolCallFormat(source), ToolCallFormat::kDeepSeekV3);
  EXPECT_FALSE(TemplateRendersTools(source));
}

TEST(ToolCalls, DeepSeekCallsInBothForms) {
  const ParsedReply v3 = ParseToolCalls(
      ToolCallFormat::kDeepSeekV3,
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
      "```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
      "<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ExpectReply(v3, "Checking.", {{"get_weather", R"({"city":"Oslo"})"}, {"now", "{}"}});
  const ParsedReply v31 = ParseToolCalls(
      ToolCallFormat::kDeepSeekV31,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
      "\"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜> Done.");
  ExpectReply(v31, "Done.", {{"get_weather", R"({"city":"Paris"})"}});
  // A call whose arguments are not a JSON object stays text; an unclosed block still parses.
  const ParsedReply bad = ParseToolCalls(
      ToolCallFormat::kDeepSeekV31,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1]<｜tool▁call▁end｜>");
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "<｜tool▁call▁begin｜>f<｜tool▁sep｜>[1]<｜tool▁call▁end｜>");
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kDeepSeekV31,
                           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1}")
                .calls.size(),
            1u);
  ToolCallStream st(ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(st.Push("Hi <｜tool"), "Hi ");
  EXPECT_EQ(st.Push("▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}"),
            "");
  EXPECT_EQ(st.Finish().calls.size(), 1u);
}

TEST(ToolCalls, GlmArgumentsAreKeyValuePairsTypedByTheSchema) {
  const ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "zip": {"type": "string"}, "days": {"type": "integer"},
      "hourly": {"type": "boolean"}}}}}])");
  const ParsedReply r = ParseToolCalls(
      ToolCallFormat::kGlm,
      "Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo"
      "</arg_value>\n<arg_key>zip</arg_key>\n<arg_value>0150</arg_value>\n<arg_key>days"
      "</arg_key>\n<arg_value>3</arg_value>\n<arg_key>hourly</arg_key>\n<arg_value>true"
      "</arg_value>\n</tool_call><tool_call>now</tool_call>",
      tools);
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo","zip":"0150","days":3,"hourly":true})")
      << "zip is a string by its schema, days and hourly are JSON";
  EXPECT_EQ(r.calls[1].name, "now");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  // Without a schema, a value is JSON when it parses.
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kGlm,
                           "<tool_call>f<arg_key>n</arg_key><arg_value>150</arg_value>"
                           "<arg_key>s</arg_key><arg_value>a b</arg_value></tool_call>")
                .calls[0]
                .arguments,
            R"({"n":150,"s":"a b"})");
  // An unfinished pair is not a call.
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kGlm, "<tool_call>f<arg_key>n</arg_key><arg_value>1")
                  .calls.empty());
}

// MiniMax-M2: one block holds every call of a reply, each an <invoke> of <parameter>s typed
// as GLM's values.
TEST(ToolCalls, MiniMaxInvokesInOneBlock) {
  EXPECT_EQ(DetectToolCallFormat("{% if tools %}{% endif %}{%- set toolcall_begin_token = "
                                 "'<minimax:tool_call>' -%}<invoke name=\""),
            ToolCallFormat::kMiniMax);
  EXPECT_FALSE(ArgumentsAsText(ToolCallFormat::kMiniMax));
  const ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "zip": {"type": "string"}, "days": {"type": "integer"}}}}}])");
  const ParsedReply r = ParseToolCalls(
      ToolCallFormat::kMiniMax,
      "<think>\nweather\n</think>\nLet me check.\n<minimax:tool_call>\n<invoke "
      "name=\"get_weather\">"
      "\n<parameter name=\"city\">Oslo</parameter>\n<parameter name=\"zip\">0150</parameter>\n"
      "<parameter name=\"days\">3</parameter>\n</invoke>\n<invoke name=\"now\">\n</invoke>\n"
      "</minimax:tool_call>",
      tools);
  EXPECT_EQ(r.content, "<think>\nweather\n</think>\nLet me check.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo","zip":"0150","days":3})");
  EXPECT_EQ(r.calls[1].name, "now");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  // A block without a call stays text; an unclosed block (max_tokens) still parses.
  const ParsedReply bad =
      ParseToolCalls(ToolCallFormat::kMiniMax, "a <minimax:tool_call>nope</minimax:tool_call> b");
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "a <minimax:tool_call>nope</minimax:tool_call> b");
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kMiniMax,
                           "<minimax:tool_call>\n<invoke name=\"f\">\n<parameter name=\"n\">1"
                           "</parameter>")
                .calls.size(),
            1u);
  // An unfinished parameter is not a call.
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kMiniMax,
                             "<minimax:tool_call><invoke name=\"f\"><parameter name=\"n\">1")
                  .calls.empty());
  ToolCallStream st(ToolCallFormat::kMiniMax);
  EXPECT_EQ(st.Push("Sure. <minimax:to"), "Sure. ");
  EXPECT_EQ(st.Push("ol_call>\n<invoke name=\"now\">\n</invoke>\n</minimax:tool_call>"), "");
  EXPECT_EQ(st.Finish().calls.size(), 1u);
}

TEST(ToolCalls, HarmonyRepliesAreChannels) {
  EXPECT_EQ(DetectToolCallFormat("{% if tools %}{% endif %}<|start|>assistant<|channel|>final"),
            ToolCallFormat::kHarmony);
  const ordered_json tools = ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get_weather"}},
          {"type": "function", "function": {"name": "now"}}])");
  const std::string call =
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}"
      "<|call|>";
  const ParsedReply r = ParseToolCalls(ToolCallFormat::kHarmony, call, tools);
  EXPECT_EQ(r.content, "") << "analysis is reasoning, not content";
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kHarmony, call, ordered_json::array()).calls.empty())
      << "no tools offered, no calls";
  // The recipient may stand in the role part of the header.
  const ParsedReply role = ParseToolCalls(
      ToolCallFormat::kHarmony,
      "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>", tools);
  ASSERT_EQ(role.calls.size(), 1u);
  EXPECT_EQ(role.calls[0].name, "now");
  const ParsedReply final_text = ParseToolCalls(
      ToolCallFormat::kHarmony,
      "<|channel|>analysis<|message|>Greet.<|end|><|start|>assistant<|channel|>commentary"
      "<|message|>Preamble. <|end|><|start|>assistant<|channel|>final<|message|>Hello there."
      "<|return|>",
      tools);
  EXPECT_EQ(final_text.content, "Preamble. Hello there.");
  EXPECT_TRUE(final_text.calls.empty());
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kHarmony, "no markers", tools).content, "no markers");
  // Streamed: only content leaves, as it grows; the call waits for Finish.
  ToolCallStream st(ToolCallFormat::kHarmony, tools);
  EXPECT_EQ(st.Push("<|channel|>analysis<|message|>Think"), "");
  EXPECT_EQ(st.Push("ing.<|end|><|start|>assistant<|channel|>final<|message|>Hel"), "Hel");
  EXPECT_EQ(st.Push("lo <"), "lo ") << "'<|' may begin a marker";
  EXPECT_EQ(st.Push("|end|><|start|>assistant to=functions.now<|channel|>commentary"), "");
  EXPECT_EQ(st.Push(" <|constrain|>json<|message|>{}"), "");
  const ParsedReply rest = st.Finish();
  EXPECT_EQ(rest.content, "");
  ASSERT_EQ(rest.calls.size(), 1u);
  EXPECT_EQ(rest.calls[0].name, "now");
}

// A grammar names the special tokens it may match: harmony's forced call allows <|channel|>
// and its kin as whole tokens, every other grammar none.
TEST(ToolCalls, AHarmonyCallGrammarAllowsItsSpecialTokens) {
  const std::vector<std::string> vocab = {"<|channel|>",
                                          "<|constrain|>",
                                          "<|message|>",
                                          "<|end|>",
                                          "commentary to=functions.now ",
                                          "json",
                                          "{}",
                                          "{",
                                          "}",
                                          "<|"};
  const std::vector<bool> special = {true,  true,  true,  true,  false,
                                     false, false, false, false, false};
  const auto trie = std::make_shared<const TokenTrie>(vocab, special);
  const ordered_json tools =
      ordered_json::parse(R"([{"type": "function", "function": {"name": "now"}}])");
  GrammarMatcher m(ToolCallGrammar(ToolCallFormat::kHarmony, tools, ""), trie);
  // <|channel|> whole, or its text spelled by plain tokens ("<|"), as any literal may be.
  EXPECT_EQ(m.AllowedTokens(), std::vector<int32_t>({0, 9}));
  ASSERT_TRUE(m.AcceptToken(0));
  ASSERT_TRUE(m.AcceptToken(4));
  EXPECT_EQ(m.AllowedTokens(), std::vector<int32_t>({1, 9}));
  ASSERT_TRUE(m.AcceptToken(1));
  ASSERT_TRUE(m.AcceptToken(5));
  ASSERT_TRUE(m.AcceptToken(2));
  EXPECT_FALSE(m.AcceptToken(3)) << "<|end|> is not named";
  EXPECT_EQ(m.AllowedTokens(), std::vector<int32_t>({6, 7}));
  ASSERT_TRUE(m.AcceptToken(6));
  EXPECT_TRUE(m.IsComplete());
  // The Hermes grammar names none: its text spelled by special tokens is never allowed.
  GrammarMatcher hermes(ToolCallGrammar(ToolCallFormat::kHermes, tools, ""), trie);
  EXPECT_FALSE(hermes.AcceptToken(0));
}

// Every format: a call written as its templates write it parses back to the same call, and the
// forcing grammar accepts exactly that text.
TEST(ToolCalls, WrittenCallsParseBackAndMatchTheGrammar) {
  const ordered_json tools = ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
      "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now"}}])");
  for (ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kMistral, ToolCallFormat::kDeepSeekV3,
        ToolCallFormat::kDeepSeekV31, ToolCallFormat::kGlm, ToolCallFormat::kMiniMax,
        ToolCallFormat::kHarmony}) {
    SCOPED_TRACE(static_cast<int>(format));
    const ToolCall call{"", "get_weather", R"({"city": "Oslo", "days": 2, "unit": "f"})"};
    const std::string text = WriteToolCall(format, call);
    const ParsedReply r = ParseToolCalls(format, text, tools);
    ASSERT_EQ(r.calls.size(), 1u) << text;
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo","days":2,"unit":"f"})");
    EXPECT_EQ(r.content, "");
    const auto named = ToolCallGrammar(format, tools, "get_weather");
    EXPECT_TRUE(Matches(*named, text)) << text;
    const auto any = ToolCallGrammar(format, tools, "");
    EXPECT_TRUE(Matches(*any, text)) << text;
    EXPECT_TRUE(Matches(*any, WriteToolCall(format, {"", "now", "{}"})));
    EXPECT_FALSE(Matches(*named, WriteToolCall(format, {"", "now", "{}"})));
    EXPECT_FALSE(Matches(*named, WriteToolCall(format, {"", "get_weather", R"({"days": 2})"})))
        << "city is required";
    EXPECT_FALSE(Matches(*named, WriteToolCall(format, {"", "get_weather",
                                                        R"({"city": "x",)"
                                                        R"( "days": "two"})"})))
        << "days is an integer";
    EXPECT_FALSE(Matches(*named, WriteToolCall(format, {"", "get_weather",
                                                        R"({"city": "x",)"
                                                        R"( "unit": "k"})"})))
        << "unit is c or f";
    // The instructions for templates without the tool list show the same form.
    EXPECT_NE(ToolInstructions(format, tools)
                  .find(WriteToolCall(format, {"", "NAME", R"({"PARAMETER": "VALUE"})"})),
              std::string::npos);
  }
  // GLM's raw strings cannot hold '<' (it would read as a tag).
  EXPECT_FALSE(
      Matches(*ToolCallGrammar(ToolCallFormat::kGlm, tools, "get_weather"),
              WriteToolCall(ToolCallFormat::kGlm, {"", "get_weather", R"({"city": "a<b"})"})));
  EXPECT_THROW(WriteToolCall(ToolCallFormat::kNone, {"", "f", "{}"}), Error);
}

TEST(ToolCalls, MistralCallsAreAJsonListAfterTheMarker) {
  const ParsedReply r = ParseToolCalls(
      ToolCallFormat::kMistral,
      "Checking. [TOOL_CALLS][{\"name\": \"get\", \"arguments\": {\"city\": \"Oslo\"}}, "
      "{\"name\": \"now\", \"arguments\": {}}]</s>");
  ExpectReply(r, "Checking.", {{"get", R"({"city":"Oslo"})"}, {"now", "{}"}});
  // A list that does not parse, or holds something else, stays text.
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": ").calls.empty());
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kMistral, "[TOOL_CALLS][1, 2]").calls.empty());
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kMistral, "plain").content, "plain");
  // Ids as each format's templates accept them.
  const std::string id = NewToolCallId(ToolCallFormat::kMistral);
  EXPECT_EQ(id.size(), 9u);
  EXPECT_EQ(NewToolCallId(ToolCallFormat::kHermes).rfind("call_", 0), 0u);
  ToolCallStream st(ToolCallFormat::kMistral);
  EXPECT_EQ(st.Push("ok [TOOL"), "ok ");
  EXPECT_EQ(st.Push("_CALLS][{\"name\": \"now\", \"arguments\": {}}]"), "");
  ASSERT_EQ(st.Finish().calls.size(), 1u);
}

TEST(ToolCalls, ARepliesCallsAndContentAreSplit) {
  const ParsedReply r = ParseToolCalls(
      ToolCallFormat::kHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
      "\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>");
  ExpectReply(r, "Let me look.", {{"get_weather", R"({"city":"Paris"})"}, {"now", "{}"}});
  // A block that is not a call stays text; an unclosed last block (max_tokens) still parses.
  const ParsedReply bad = ParseToolCalls(ToolCallFormat::kHermes, "a <tool_call>{nope</tool_call> b");
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "a <tool_call>{nope</tool_call> b");
  const ParsedReply open =
      ParseToolCalls(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}");
  ASSERT_EQ(open.calls.size(), 1u);
  EXPECT_EQ(open.calls[0].arguments, "{}") << "string arguments are kept as sent";
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kNone, "<tool_call>x").content, "<tool_call>x");
}

TEST(ToolCalls, AStreamSendsContentAtOnceAndHoldsAMarkerBack) {
  ToolCallStream s(ToolCallFormat::kHermes);
  EXPECT_EQ(s.Push("Sure, "), "Sure, ");
  EXPECT_EQ(s.Push("one <"), "one ") << "'<' may begin the marker";
  EXPECT_EQ(s.Push("tool"), "");
  EXPECT_EQ(s.Push("_call>\n{\"name\": \"f\", "), "");
  EXPECT_EQ(s.Push("\"arguments\": {\"x\": 1}}\n</tool_call>"), "");
  const ParsedReply r = s.Finish();
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"x":1})");
  ToolCallStream t(ToolCallFormat::kHermes);
  EXPECT_EQ(t.Push("a <b"), "a <b") << "not the marker after all";
  EXPECT_EQ(t.Push(" c <tool"), " c ");
  EXPECT_EQ(t.Finish().content, "<tool");
}

TEST(ToolCalls, TheGrammarForcesAValidCall) {
  const ordered_json tools = ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object", "properties": {"city": {"type": "string"},
      "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now"}}])");
  const auto weather = ToolCallGrammar(ToolCallFormat::kHermes, tools, "get_weather");
  EXPECT_TRUE(Matches(*weather,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"
                      "\n</tool_call>"));
  EXPECT_TRUE(Matches(*weather, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":"
                                "\"Oslo\",\"unit\":\"c\"}}\n</tool_call>"));
  EXPECT_FALSE(Matches(*weather, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Matches(*weather, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                 "{\"unit\": \"c\"}}\n</tool_call>"))
      << "city is required";
  EXPECT_FALSE(Matches(*weather, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}"));
  const auto any = ToolCallGrammar(ToolCallFormat::kHermes, tools, "");
  EXPECT_TRUE(Matches(*any, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_THROW(ToolCallGrammar(ToolCallFormat::kHermes, tools, "nope"), Error);
  const auto mistral = ToolCallGrammar(ToolCallFormat::kMistral, tools, "now");
  EXPECT_TRUE(Matches(*mistral, "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]"));
  EXPECT_FALSE(Matches(*mistral, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
}

}  // namespace
}  // namespace moex::serve

// Tool calling's text side: which format a template asks for, a reply split into content and
// calls (whole and streamed), and the grammar that forces a valid call. Hand-made cases.
#include "serve/tool_calls.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/error.h"
#include "text/grammar_matcher.h"

namespace moex::serve {
namespace {

using nlohmann::ordered_json;

constexpr const char* kQwenLike =
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    "{{ c.function | tojson }}\n</tool_call>{% endfor %}{% endif %}{% endfor %}";

TEST(ToolCalls, TheFormatComesFromTheTemplate) {
  EXPECT_EQ(DetectToolCallFormat(kQwenLike), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat("{% for m in messages %}{{ m.content }}{% endfor %}"),
            ToolCallFormat::kNone);
  EXPECT_EQ(DetectToolCallFormat("{{ tools }}[TOOL_CALLS]"), ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat("{{ tools }}<｜tool▁calls▁begin｜>"), ToolCallFormat::kNone)
      << "DeepSeek's format has no parser yet";
}

TEST(ToolCalls, MistralCallsAreAJsonListAfterTheMarker) {
  const ParsedReply r = ParseToolCalls(
      ToolCallFormat::kMistral,
      "Checking. [TOOL_CALLS][{\"name\": \"get\", \"arguments\": {\"city\": \"Oslo\"}}, "
      "{\"name\": \"now\", \"arguments\": {}}]</s>");
  EXPECT_EQ(r.content, "Checking.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(r.calls[1].name, "now");
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
  EXPECT_EQ(r.content, "Let me look.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(r.calls[1].name, "now");
  EXPECT_EQ(r.calls[1].arguments, "{}");
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

bool Matches(const Grammar& g, const std::string& text) {
  GrammarMatcher m(std::make_shared<Grammar>(g), nullptr);
  return m.AcceptBytes(text) && m.IsComplete();
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

// `moex serve` against clients written by others: the official `openai` npm client (chat
// and text completions, streaming and not) on the demo model and on an offloaded random
// model, Anthropic's SDK and the openai client's Responses API in a tool loop, the Vercel AI
// SDK and LangChain JS in a tool loop, the web page in headless Chromium, and promtool on /metrics.
// The Node scripts and their packages live in tests/serve_clients (installed by its install.sh);
// where a tool is missing the test is skipped with the reason, and fails under CI.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support/external_tools.h"
#include "support/run_command.h"
#include "support/serve_fixtures.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex::serve {
namespace {

using nlohmann::json;
using testing::RunningServer;

cli::ModelOptions DemoModel() {
  cli::ModelOptions m;
  m.model = (testing::SourceDir() / "models/olmoe-demo").string();
  return m;
}

cli::ModelOptions OffloadedTinyModel() {
  cli::ModelOptions m;
  m.model = testing::TinyModelPath(Arch::kOlmoe);
  m.host_budget = "25%";
  m.policy = "lru";
  return m;
}

// Runs `node SCRIPT ARGS` in tests/serve_clients.
testing::CommandResult Node(const std::string& script, const std::string& args) {
  return testing::RunCommand("cd '" + testing::ServeClientsDir().string() + "' && node " + script +
                             " " + args);
}

TEST(ServeClients, OpenAiClientOnTheDemoModel) {
  MOEX_REQUIRE_TOOL(testing::ServeClientsMissing({"openai"}));
  RunningServer s(DemoModel(), ServerOptions{});
  const testing::CommandResult r =
      Node("openai_client.mjs",
           "--kind text --base-url http://127.0.0.1:" + std::to_string(s.port) + "/v1");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out << r.err;
}

TEST(ServeClients, OpenAiClientOnAnOffloadedRandomModelWithAKey) {
  MOEX_REQUIRE_TOOL(testing::ServeClientsMissing({"openai"}));
  ServerOptions options;
  options.api_key = "test-key";
  RunningServer s(OffloadedTinyModel(), options);
  const testing::CommandResult r =
      Node("openai_client.mjs", "--kind ids --api-key test-key --base-url http://127.0.0.1:" +
                                    std::to_string(s.port) + "/v1");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("ok: a wrong key is AuthenticationError"), std::string::npos) << r.out;
}

// Runs `node SCRIPT --port P --api-key K` against a server of the tool-calling tiny model
// (served as "tools", behind key K) and expects every check of the script to pass.
void RunToolModelScript(const std::string& script) {
  testing::TempDir dir;
  ServerOptions options = testing::SmallBatchOptions();
  options.api_key = "test-key";
  options.model_name = "tools";
  // A random model at temperature 0.7 may wander in a JSON's optional whitespace until
  // max_tokens; compact JSON leaves it only the values to choose.
  options.compact_json = true;
  RunningServer s(testing::ToolTemplateModel(dir.path()), options);
  const testing::CommandResult r =
      Node(script, "--api-key test-key --port " + std::to_string(s.port));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out << r.err;
}

// Anthropic's SDK on /v1/messages and the openai client's Responses API on /v1/responses, a
// tool loop each, behind a key (Anthropic's client sends it as x-api-key).
TEST(ServeClients, AnthropicAndResponsesClientsRunAToolLoop) {
  MOEX_REQUIRE_TOOL(testing::ServeClientsMissing({"openai", "@anthropic-ai/sdk"}));
  RunToolModelScript("dialects_client.mjs");
}

// The Vercel AI SDK and LangChain JS on chat completions: a tool loop, a streamed call and
// a schema-following object each.
TEST(ServeClients, AiSdkAndLangChainRunAToolLoop) {
  MOEX_REQUIRE_TOOL(testing::ServeClientsMissing(
      {"ai", "@ai-sdk/openai-compatible", "@langchain/openai", "@langchain/core"}));
  RunToolModelScript("apps_client.mjs");
}

// The demo model with its experts offloaded (25 %), behind a key the page must ask for.
TEST(ServeClients, WebPageInHeadlessChromium) {
  MOEX_REQUIRE_TOOL(testing::ServeClientsMissing({"puppeteer-core"}));
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("chromium"));
  testing::TempDir dir;
  cli::ModelOptions model = DemoModel();
  model.host_budget = "25%";
  model.store = dir / "demo.store";
  ServerOptions options;
  options.api_key = "page-key";
  options.model_name = "olmoe-demo";
  RunningServer s(model, options);
  const testing::CommandResult r =
      Node("web_page.mjs",
           "--api-key page-key --chromium \"$(command -v chromium)\" --url http://127.0.0.1:" +
               std::to_string(s.port) + "/");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out << r.err;
}

// promtool (Debian's prometheus package) accepts /metrics, offload counters included,
// after successful and failed requests.
TEST(ServeMetricsFormat, PromtoolChecksTheExposition) {
  MOEX_REQUIRE_TOOL(testing::ProgramMissing("promtool"));
  RunningServer s(OffloadedTinyModel(), ServerOptions{});
  const json ok = {{"prompt", {1, 2, 3}}, {"max_tokens", 4}, {"temperature", 0}};
  ASSERT_EQ(s.Post("/v1/completions", ok).status, 200);
  ASSERT_EQ(s.PostRaw("/v1/completions", "{").status, 400);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // Offload snapshot refresh.
  const HttpResult metrics = s.Get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  ASSERT_NE(metrics.body.find("moex_offload_hits_total{layer="), std::string::npos);
  testing::TempDir dir;
  const std::string path = dir / "metrics.txt";
  std::ofstream(path) << metrics.body;
  // Braces: RunCommand appends its own redirections, which must not replace this one.
  const testing::CommandResult r =
      testing::RunCommand("{ promtool check metrics < '" + path + "'; }");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out + r.err, "") << "promtool found problems";

  // And it is not a checker that accepts anything: a counter without _total is flagged.
  std::ofstream(dir / "bad.txt")
      << "# HELP moex_bad a counter\n# TYPE moex_bad counter\nmoex_bad 1\n";
  const testing::CommandResult bad =
      testing::RunCommand("{ promtool check metrics < '" + dir / "bad.txt" + "'; }");
  EXPECT_NE(bad.exit_code, 0) << bad.out << bad.err;
  EXPECT_NE((bad.out + bad.err).find("should have \"_total\" suffix"), std::string::npos)
      << bad.out << bad.err;
}

}  // namespace
}  // namespace moex::serve

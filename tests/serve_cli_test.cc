// `moex serve` as a process: prints its address when ready, answers, exits 0 on SIGTERM after
// finishing the running request, and refuses a busy port with a clear error.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/http_client.h"
#include "support/run_command.h"
#include "support/serve_fixtures.h"
#include "support/tiny_models.h"

namespace moex::serve {
namespace {

using nlohmann::json;

using testing::ServeProcess;

TEST(ServeCli, AnswersThenDrainsOnSigterm) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  ServeProcess p({"--model", model, "--port", "0", "--host-budget", "25%", "--policy", "lru",
                  "--threads", "1", "--max-running", "4"});
  const int port = p.ReadPort();
  ASSERT_GT(port, 0);
  const json request = {{"prompt", {1, 2, 3}}, {"max_tokens", 5}, {"temperature", 0}};
  const HttpResult r = HttpRequest("127.0.0.1", port, "POST", "/v1/completions", request.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["usage"]["completion_tokens"], 5);

  // A long stream is running when SIGTERM comes: it still ends with its last token.
  json longer = {{"prompt", {4, 5}},
                 {"max_tokens", 200},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"stream", true}};
  std::atomic<bool> streaming{false};
  HttpResult streamed;
  std::thread client([&] {
    streamed = HttpRequest("127.0.0.1", port, "POST", "/v1/completions", longer.dump(), {},
                           [&](const std::string&) {
                             streaming = true;
                             return true;
                           });
  });
  for (int i = 0; i < 2000 && !streaming; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  p.Signal(SIGTERM);
  client.join();
  EXPECT_EQ(p.Wait(), 0);
  ASSERT_EQ(streamed.status, 200);
  ASSERT_FALSE(streamed.events.empty());
  EXPECT_EQ(streamed.events.back(), "[DONE]");
  int tokens = 0;
  for (size_t i = 0; i + 1 < streamed.events.size(); ++i)
    tokens += static_cast<int>(json::parse(streamed.events[i])["choices"][0]["token_ids"].size());
  EXPECT_EQ(tokens, 200);
}

TEST(ServeCli, BusyPortIsAClearError) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  ServeProcess first({"--model", model, "--port", "0"});
  const int port = first.ReadPort();
  ASSERT_GT(port, 0);
  const testing::CommandResult second = testing::RunCommand(
      testing::MoexBinary() + " serve --model " + model + " --port " + std::to_string(port));
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("cannot listen on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << second.err;
  first.Signal(SIGINT);
  EXPECT_EQ(first.Wait(), 0);
}

TEST(ServeCli, AnEmptyApiKeyIsRefused) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const testing::CommandResult r = testing::RunCommand(
      testing::MoexBinary() + " serve --model " + model + " --port 0 --api-key ''");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("an empty key would turn authentication off"), std::string::npos)
      << r.err;
}

TEST(ServeCli, APrefixCacheBudgetMustBeBytes) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  for (const char* bad : {"25%", "-1GiB", "lots"}) {
    const testing::CommandResult r = testing::RunCommand(
        testing::MoexBinary() + " serve --model " + model + " --port 0 --prefix-cache " + bad);
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_TRUE(r.err.find("--prefix-cache") != std::string::npos ||
                r.err.find("budget") != std::string::npos)
        << bad << ": " << r.err;
  }
}

TEST(ServeCli, BadSchedulerOptionsAreRefused) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const testing::CommandResult r =
      testing::RunCommand(testing::MoexBinary() + " serve --model " + model +
                          " --port 0 --max-batch-tokens 8 --max-running 4 --prefill-chunk 64");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--max-batch-tokens (8) must be at least --prefill-chunk (64)"),
            std::string::npos)
      << r.err;
  const testing::CommandResult running = testing::RunCommand(
      testing::MoexBinary() + " serve --model " + model + " --port 0 --max-running 600");
  EXPECT_EQ(running.exit_code, 1);
  EXPECT_NE(running.err.find("--max-batch-tokens (512) must be at least --max-running (600)"),
            std::string::npos)
      << running.err;
  // With units of two passes, a pass holds half the running requests.
  const testing::CommandResult units =
      testing::RunCommand(testing::MoexBinary() + " serve --model " + model +
                          " --port 0 --max-running 600 --max-batch-tokens 256 --regroup 2");
  EXPECT_EQ(units.exit_code, 1);
  EXPECT_NE(units.err.find("--max-batch-tokens (256) must be at least --max-running (600) / "
                           "--regroup (2)"),
            std::string::npos)
      << units.err;
  const testing::CommandResult negative = testing::RunCommand(
      testing::MoexBinary() + " serve --model " + model + " --port 0 --regroup -1");
  EXPECT_NE(negative.exit_code, 0) << negative.err;  // CLI11's validation error.
  EXPECT_NE(negative.err.find("--regroup: Value -1 not in range 0 to 64"), std::string::npos)
      << negative.err;
}

}  // namespace
}  // namespace moex::serve

// The port `moex serve` answers on while the model loads: 503 "loading" with the latest
// progress, every other request 503, and the port free again once it stops.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/progress.h"
#include "serve/http_client.h"
#include "serve/loading_server.h"

namespace moex::serve {
namespace {

using nlohmann::json;

TEST(ServeLoadingServer, HealthSaysLoadingWithProgressAndTheRestIs503) {
  PublishProgress("", 0, 0);
  int port = 0;
  {
    LoadingServer loading("127.0.0.1");
    port = loading.Start(0);
    ASSERT_GT(port, 0);
    HttpResult health = HttpRequest("127.0.0.1", port, "GET", "/health", "");
    ASSERT_EQ(health.status, 503) << health.error;
    EXPECT_EQ(json::parse(health.body), (json{{"status", "loading"}}));
    PublishProgress("packing experts (bytes)", 3, 4);
    health = HttpRequest("127.0.0.1", port, "GET", "/health", "");
    const json j = json::parse(health.body);
    EXPECT_EQ(j["status"], "loading");
    EXPECT_DOUBLE_EQ(j["progress"].get<double>(), 0.75);
    EXPECT_EQ(j["stage"], "packing experts (bytes)");
    const HttpResult chat =
        HttpRequest("127.0.0.1", port, "POST", "/v1/chat/completions", R"({"messages":[]})");
    EXPECT_EQ(chat.status, 503);
    EXPECT_NE(json::parse(chat.body)["error"]["message"].get<std::string>().find("loading"),
              std::string::npos)
        << chat.body;
    EXPECT_EQ(chat.Header("Retry-After"), "1");
  }
  // Stopped (by the destructor): the same port binds again.
  LoadingServer again("127.0.0.1");
  EXPECT_EQ(again.Start(port), port);
  again.Stop();
  PublishProgress("", 0, 0);
}

TEST(ServeLoadingServer, ABusyPortIsAClearError) {
  LoadingServer first("127.0.0.1");
  const int port = first.Start(0);
  LoadingServer second("127.0.0.1");
  try {
    second.Start(port);
    FAIL() << "bound a busy port";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moex::serve

// The server's access log (one line per request, text or JSON) and its Warning header for
// request fields it ignores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serve/access_log.h"
#include "support/serve_fixtures.h"
#include "support/tiny_models.h"

namespace moex::serve {
namespace {

using nlohmann::json;

TEST(ServeAccessLog, FormatsACompletionAndAPlainRequest) {
  AccessRecord r{"127.0.0.1", "POST", "/v1/completions", 200, 12, 32, 45.04, 812.26};
  EXPECT_EQ(FormatAccessRecord(r, AccessLogFormat::kText),
            "127.0.0.1 POST /v1/completions 200 prompt=12 completion=32 ttft=45.0ms 812.3ms");
  const json j = json::parse(FormatAccessRecord(r, AccessLogFormat::kJson));
  EXPECT_EQ(j["path"], "/v1/completions");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["prompt_tokens"], 12);
  EXPECT_EQ(j["completion_tokens"], 32);
  EXPECT_DOUBLE_EQ(j["ttft_ms"].get<double>(), 45.04);
  // Not a completion: no token fields; a control character in the path stays on the line.
  AccessRecord health{"::1", "GET", "/health\n", 503, -1, -1, -1, 0.25};
  EXPECT_EQ(FormatAccessRecord(health, AccessLogFormat::kText), "::1 GET /health? 503 0.2ms");
  EXPECT_FALSE(json::parse(FormatAccessRecord(health, AccessLogFormat::kJson))
                   .contains("prompt_tokens"));
  EXPECT_THROW(ParseAccessLogFormat("xml"), Error);
  EXPECT_EQ(ParseAccessLogFormat("json"), AccessLogFormat::kJson);
}

TEST(ServeAccessLog, WritesOneLinePerRequestWithItsRecord) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  AccessLog log(AccessLogFormat::kJson, out);
  const int a = 0, b = 0;  // Two requests in flight, keyed by address.
  log.Begin(&a);
  log.Begin(&b);
  log.Record(&a)->prompt_tokens = 3;
  log.End(&b, "r", "GET", "/health", 200);
  log.End(&a, "r", "POST", "/v1/chat/completions", 200);
  std::rewind(out);
  char line[512];
  ASSERT_NE(std::fgets(line, sizeof line, out), nullptr);
  EXPECT_EQ(json::parse(line)["path"], "/health");
  EXPECT_FALSE(json::parse(line).contains("prompt_tokens"));
  ASSERT_NE(std::fgets(line, sizeof line, out), nullptr);
  EXPECT_EQ(json::parse(line)["prompt_tokens"], 3);
  EXPECT_EQ(std::fgets(line, sizeof line, out), nullptr);
  std::fclose(out);
  // Off: no records, nothing written.
  AccessLog off(AccessLogFormat::kOff, stderr);
  EXPECT_EQ(off.Record(&a), nullptr);
}

cli::ModelOptions Tiny() {
  cli::ModelOptions m;
  m.model = testing::TinyModelPath(Arch::kOlmoe);
  return m;
}

TEST(ServeAccessLog, TheServerLogsCompletionsWithTokensAndTtft) {
  ServerOptions options;
  options.access_log = AccessLogFormat::kJson;
  ::testing::internal::CaptureStderr();
  {
    testing::RunningServer s(Tiny(), options);
    const HttpResult r = s.Post("/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 4}});
    ASSERT_EQ(r.status, 200) << r.body;
    const HttpResult streamed = s.Post(
        "/v1/completions",
        {{"prompt", {1, 2}}, {"max_tokens", 3}, {"stream", true}, {"ignore_eos", true}});
    ASSERT_EQ(streamed.status, 200);
    EXPECT_EQ(s.Get("/health").status, 200);  // Passing health checks are not logged.
    EXPECT_EQ(s.Get("/nowhere").status, 404);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  std::vector<json> lines;
  size_t start = 0;
  for (size_t end; (end = err.find('\n', start)) != std::string::npos; start = end + 1) {
    const json j = json::parse(err.substr(start, end - start), nullptr, false);
    if (j.is_object() && j.contains("path")) lines.push_back(j);
  }
  // A client has its response before httplib writes the line: lines may come in any order.
  ASSERT_EQ(lines.size(), 3u) << err;
  std::sort(lines.begin(), lines.end(), [](const json& a, const json& b) {
    return a.value("prompt_tokens", 0) > b.value("prompt_tokens", 0);
  });
  EXPECT_EQ(lines[0]["method"], "POST");
  EXPECT_EQ(lines[0]["status"], 200);
  EXPECT_EQ(lines[0]["prompt_tokens"], 3);
  EXPECT_EQ(lines[0]["completion_tokens"], 4);
  EXPECT_GE(lines[0]["ttft_ms"].get<double>(), 0.0);
  EXPECT_GE(lines[0]["duration_ms"].get<double>(), lines[0]["ttft_ms"].get<double>());
  EXPECT_EQ(lines[1]["prompt_tokens"], 2);  // The stream's line, written at its end.
  EXPECT_EQ(lines[1]["completion_tokens"], 3);
  EXPECT_EQ(lines[2]["path"], "/nowhere");
  EXPECT_EQ(lines[2]["status"], 404);
}

TEST(ServeAccessLog, IgnoredFieldsAreNamedInAWarningHeader) {
  testing::RunningServer s(Tiny(), ServerOptions{});
  HttpResult r = s.Post("/v1/completions", {{"prompt", {1, 2}},
                                            {"max_tokens", 2},
                                            {"mirostat", 2},
                                            {"n_probs", 3},
                                            {"min_p", 0.1}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("Warning"), "299 moex \"ignored unknown fields: mirostat, n_probs\"");
  r = s.Post("/v1/completions", {{"prompt", {1, 2}}, {"max_tokens", 2}});
  EXPECT_EQ(r.Header("Warning"), "");
}

}  // namespace
}  // namespace moex::serve

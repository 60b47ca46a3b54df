// `moex serve` under load, as a process on the demo model: 32 concurrent streaming clients
// for 60 s (MOEX_SERVE_LOAD_SECONDS changes it) with chat requests drawn from the shared
// ShareGPT prompt set. Every response is complete (each token asked for, a finish reason,
// usage, [DONE]) and none fails; clients that hang up mid-stream have their requests freed;
// the server's resident memory is flat after warm-up; and SIGTERM while streams run lets
// every one of them finish before the server exits 0.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/prompt_set.h"
#include "serve/http_client.h"
#include "support/external_tools.h"
#include "support/serve_fixtures.h"
#include "support/shared_data.h"

namespace moex::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// What one streamed chat request returned, checked for completeness.
struct Outcome {
  bool complete = false;
  bool hung_up = false;
  std::string problem;
};

json ChatRequest(const std::string& prompt, int max_tokens) {
  return {{"messages", {{{"role", "user"}, {"content", prompt}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0.7},
          {"seed", max_tokens},
          {"ignore_eos", true},  // Every request generates exactly max_tokens.
          {"stream", true},
          {"stream_options", {{"include_usage", true}}}};
}

// Streams one request; with `hang_up_after` > 0 the client leaves after that many events.
Outcome Stream(int port, const json& request, int hang_up_after = 0) {
  Outcome o;
  int events = 0, tokens = 0;
  std::string finish;
  json usage;
  const HttpResult r = HttpRequest("127.0.0.1", port, "POST", "/v1/chat/completions",
                                   request.dump(), {}, [&](const std::string& data) {
                                     if (hang_up_after > 0 && ++events > hang_up_after)
                                       return false;
                                     if (data == "[DONE]") return true;
                                     const json chunk = json::parse(data, nullptr, false);
                                     if (!chunk.is_object() || chunk.contains("error")) {
                                       o.problem = "bad event: " + data;
                                       return true;
                                     }
                                     if (chunk["usage"].is_object()) usage = chunk["usage"];
                                     if (chunk["choices"].empty()) return true;
                                     tokens +=
                                         static_cast<int>(chunk["choices"][0]["token_ids"].size());
                                     if (!chunk["choices"][0]["finish_reason"].is_null())
                                       finish = chunk["choices"][0]["finish_reason"];
                                     return true;
                                   });
  if (hang_up_after > 0) {
    o.hung_up = true;
    return o;
  }
  const int asked = request["max_tokens"];
  if (r.status != 200)
    o.problem = "HTTP " + std::to_string(r.status) + " " + r.error + " " + r.body.substr(0, 200);
  else if (r.events.empty() || r.events.back() != "[DONE]")
    o.problem = "no [DONE]";
  else if (tokens != asked || finish != "length")
    o.problem = std::to_string(tokens) + " of " + std::to_string(asked) + " tokens, finish '" +
                finish + "'";
  else if (!usage.is_object() || usage["completion_tokens"] != asked)
    o.problem = "usage " + usage.dump();
  o.complete = o.problem.empty();
  return o;
}

// The value of an unlabelled sample in a Prometheus exposition, or -1.
double MetricValue(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

TEST(ServeLoad, ThirtyTwoStreamingClientsThenSigterm) {
  const std::filesystem::path prompts_path =
      testing::SharedDataDir() / "prompts" / "sharegpt_v3_filtered_500.json";
  MOEX_REQUIRE_TOOL(std::filesystem::exists(prompts_path)
                        ? ""
                        : "shared prompts not found at " + prompts_path.string());
  std::vector<PromptEntry> prompts = LoadPromptSet(prompts_path.string());
  ASSERT_GT(prompts.size(), 32u);
  // Short prompts keep a request to a few seconds on a small machine: many requests per run.
  for (PromptEntry& p : prompts) p.text.resize(std::min<size_t>(p.text.size(), 600));
  const char* seconds_env = std::getenv("MOEX_SERVE_LOAD_SECONDS");
  const double duration_s = seconds_env ? std::atof(seconds_env) : 60.0;
  const double warmup_s = duration_s / 4;

  testing::ServeProcess server({"--model", (testing::SourceDir() / "models/olmoe-demo").string(),
                                "--port", "0", "--max-running", "32", "--max-queue", "64",
                                "--prefix-cache", "32MiB"});
  const int port = server.ReadPort();
  ASSERT_GT(port, 0);

  // Phase 1: 32 closed-loop clients; every 8th request hangs up after its second event.
  const int kClients = 32;
  std::atomic<bool> stop{false};
  std::atomic<int> next{0}, complete{0}, hung_up{0};
  std::mutex mutex;
  std::vector<std::string> problems;
  std::vector<std::pair<double, int64_t>> rss;  // (seconds, bytes)
  const auto start = Clock::now();
  std::thread sampler([&] {
    while (!stop) {
      const int64_t bytes = server.ResidentBytes();
      {
        std::lock_guard<std::mutex> lock(mutex);
        rss.emplace_back(Seconds(Clock::now() - start), bytes);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&] {
      while (!stop) {
        const int i = next++;
        const int max_tokens = 8 + (i * 7) % 25;  // 8..32 tokens.
        const json request =
            ChatRequest(prompts[static_cast<size_t>(i) % prompts.size()].text, max_tokens);
        const Outcome o = Stream(port, request, i % 8 == 7 ? 2 : 0);
        if (o.hung_up) {
          ++hung_up;
        } else if (o.complete) {
          ++complete;
        } else {
          std::lock_guard<std::mutex> lock(mutex);
          problems.push_back("request " + std::to_string(i) + ": " + o.problem);
        }
      }
    });
  while (Seconds(Clock::now() - start) < duration_s)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stop = true;
  for (auto& t : clients) t.join();
  sampler.join();

  EXPECT_TRUE(problems.empty()) << problems.size() << " failed, first: " << problems.front();
  EXPECT_GT(complete, kClients) << "every client finished at least one request";
  EXPECT_GT(hung_up, 0);
  std::printf("load: %d complete, %d hung up, %zu failed in %.0f s\n", complete.load(),
              hung_up.load(), problems.size(), duration_s);

  // Phase 2: the requests of clients that hung up were freed: nothing runs or waits.
  std::string metrics;
  bool idle = false;
  for (int i = 0; i < 300 && !idle; ++i) {
    metrics = HttpRequest("127.0.0.1", port, "GET", "/metrics", "").body;
    idle = MetricValue(metrics, "moex_running_requests") == 0 &&
           MetricValue(metrics, "moex_queue_length") == 0;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(idle) << metrics;

  // Resident memory after warm-up stays within 20 % (+ 32 MiB for the allocator's per-thread
  // arenas, which grow with scheduling noise on a loaded machine) of its level when warm-up
  // ended: a leak of requests or KV caches would grow it with the hundreds served since.
  int64_t at_warmup = 0, peak_after = 0;
  for (const auto& [t, bytes] : rss) {
    if (t <= warmup_s)
      at_warmup = std::max(at_warmup, bytes);
    else
      peak_after = std::max(peak_after, bytes);
  }
  ASSERT_GT(at_warmup, 0);
  std::printf("load: RSS %.1f MiB at the end of warm-up, peak %.1f MiB after; MiB every ~5 s:",
              at_warmup / 1048576.0, peak_after / 1048576.0);
  for (size_t i = 0; i < rss.size(); i += 10) std::printf(" %.0f", rss[i].second / 1048576.0);
  std::printf("\n");
  // Allowing for the prefix cache filling its budget after the warm-up.
  EXPECT_LE(peak_after, at_warmup + at_warmup / 5 + (32 << 20) + (32 << 20))
      << "RSS grew from " << at_warmup << " to " << peak_after << " bytes";

  // Phase 3: SIGTERM while 8 streams run; each still gets every token and [DONE].
  std::vector<Outcome> last(8);
  std::vector<std::thread> finals;
  for (size_t i = 0; i < last.size(); ++i)
    finals.emplace_back([&, i] { last[i] = Stream(port, ChatRequest(prompts[i].text, 96)); });
  for (int i = 0; i < 600; ++i) {
    metrics = HttpRequest("127.0.0.1", port, "GET", "/metrics", "").body;
    if (MetricValue(metrics, "moex_running_requests") == 8) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(MetricValue(metrics, "moex_running_requests"), 8);
  server.Signal(SIGTERM);
  for (auto& t : finals) t.join();
  EXPECT_EQ(server.Wait(), 0);
  for (size_t i = 0; i < last.size(); ++i)
    EXPECT_TRUE(last[i].complete) << "stream " << i << ": " << last[i].problem;
}

}  // namespace
}  // namespace moex::serve

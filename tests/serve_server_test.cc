// The HTTP server end to end on loopback: a tiny random model (token-id prompts, resident and
// offloaded) and the demo model (text, chat). Batched outputs equal unbatched ones, streams
// carry the same tokens, bad requests get OpenAI error JSON and the server keeps serving,
// disconnects free their slot, shutdown drains the running requests.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cli/session.h"
#include "engine/generator.h"
#include "model/random_model.h"
#include "serve/http_client.h"
#include "serve/server.h"
#include "support/serve_fixtures.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"
#include "text/byte_tokenizer_json.h"

namespace moex::serve {
namespace {

using nlohmann::json;

const std::string kDemo = (testing::SourceDir() / "models/olmoe-demo").string();

using testing::RunningServer;

cli::ModelOptions TinyModel(const std::string& budget = "", const std::string& policy = "lru") {
  cli::ModelOptions m;
  m.model = testing::TinyModelPath(Arch::kOlmoe);
  m.host_budget = budget;
  m.policy = policy;
  m.policy_worker = "sync";
  return m;
}

ServerOptions SmallBatches() { return testing::SmallBatchOptions(); }

json Completion(std::vector<int32_t> prompt, int max_tokens, double temperature = 0, int seed = 0) {
  return {{"prompt", prompt},
          {"max_tokens", max_tokens},
          {"temperature", temperature},
          {"seed", seed},
          {"ignore_eos", true}};
}

std::vector<int32_t> TokenIds(const HttpResult& r) {
  EXPECT_EQ(r.status, 200) << r.body << r.error;
  const json body = json::parse(r.body);
  return body["choices"][0]["token_ids"].get<std::vector<int32_t>>();
}

// Prompts of 1..13 tokens, several longer than a prefill chunk; one sampled request.
const std::vector<json>& Requests() {
  static const std::vector<json> requests = {
      Completion({5, 9, 200, 31}, 9),
      Completion({77}, 7),
      Completion({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, 10),
      Completion({400, 401, 402, 403, 404, 405}, 8, 0.8, 3),
      Completion({11, 22, 33, 44, 55, 66, 77, 88, 99}, 12),
      Completion({300, 3}, 5),
  };
  return requests;
}

struct Offload {
  std::string budget, policy, name;
  double tpot_target_ms = 0;  // SchedulerOptions::tpot_target_ms.
};

class ServeBatchInvariance : public ::testing::TestWithParam<Offload> {};

TEST_P(ServeBatchInvariance, ConcurrentRequestsGetTheTokensTheyGetAlone) {
  ServerOptions options = SmallBatches();
  options.scheduler.tpot_target_ms = GetParam().tpot_target_ms;
  RunningServer s(TinyModel(GetParam().budget, GetParam().policy), options);
  std::vector<std::vector<int32_t>> alone;
  for (const json& r : Requests()) alone.push_back(TokenIds(s.Post("/v1/completions", r)));

  // The engine's own one-request generation agrees with the server's.
  auto reference = cli::OpenSession(TinyModel());
  Generator generator(*reference->transformer);
  for (size_t i = 0; i < Requests().size(); ++i) {
    const json& r = Requests()[i];
    GenerationRequest g;
    g.prompt = r["prompt"].get<std::vector<int32_t>>();
    g.max_tokens = r["max_tokens"];
    g.sampling.temperature = r["temperature"].get<float>();
    g.sampling.seed = r["seed"];
    EXPECT_EQ(generator.Generate({g})[0].tokens, alone[i]) << "request " << i;
    EXPECT_EQ(alone[i].size(), static_cast<size_t>(g.max_tokens));
  }

  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<int32_t>> together(Requests().size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < Requests().size(); ++i)
      clients.emplace_back(
          [&, i] { together[i] = TokenIds(s.Post("/v1/completions", Requests()[i])); });
    for (auto& c : clients) c.join();
    for (size_t i = 0; i < Requests().size(); ++i)
      EXPECT_EQ(together[i], alone[i]) << "round " << round << ", request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Budgets, ServeBatchInvariance,
                         ::testing::Values(Offload{"", "lru", "Resident"},
                                           Offload{"25%", "lru", "Offload25Lru"},
                                           Offload{"10%", "nextgate+lfu", "Offload10NextGateLfu"},
                                           // Prefill chunks may wait for the decodes' TPOT
                                           // (which ones depends on timing).
                                           Offload{"25%", "lru", "Offload25TpotTarget", 2}),
                         [](const auto& info) { return info.param.name; });

TEST(ServeServer, StreamCarriesTheSameTokensThenDone) {
  RunningServer s(TinyModel("25%"), SmallBatches());
  json request = Requests()[2];
  const std::vector<int32_t> whole = TokenIds(s.Post("/v1/completions", request));
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  const HttpResult r = s.Post("/v1/completions", request);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_GE(r.events.size(), 3u);
  EXPECT_EQ(r.events.back(), "[DONE]");
  std::vector<int32_t> streamed;
  std::string finish;
  json usage;
  for (size_t i = 0; i + 1 < r.events.size(); ++i) {
    const json chunk = json::parse(r.events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    if (!chunk["usage"].is_null()) usage = chunk["usage"];
    if (chunk["choices"].empty()) continue;
    for (int32_t t : chunk["choices"][0]["token_ids"]) streamed.push_back(t);
    if (!chunk["choices"][0]["finish_reason"].is_null())
      finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(streamed, whole);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage["prompt_tokens"], request["prompt"].size());
  EXPECT_EQ(usage["completion_tokens"], whole.size());
  EXPECT_EQ(usage["total_tokens"], request["prompt"].size() + whole.size());
}

struct ErrorCase {
  std::string method, path, body;
  int status;
};

TEST(ServeServer, BadRequestsGetOpenAiErrorsAndTheServerKeepsServing) {
  ServerOptions options = SmallBatches();
  options.max_body_bytes = 4096;
  RunningServer s(TinyModel(), options);
  const std::vector<ErrorCase> cases = {
      {"POST", "/v1/completions", "{not json", 400},
      {"POST", "/v1/completions", R"({"prompt":[1],"max_tokens":-1})", 400},
      {"POST", "/v1/completions", R"({"prompt":[1],"max_tokens":1000000000000})", 400},
      {"POST", "/v1/completions", R"({"prompt":[1],"stop":["a","b","c","d","e","f"]})", 400},
      {"POST", "/v1/completions", "{\"prompt\":\"\xff\xfe\"}", 400},
      {"POST", "/v1/completions", R"({"prompt":[99999999]})", 400},
      {"POST", "/v1/completions", R"({"prompt":"text needs a tokenizer"})", 400},
      {"POST", "/v1/chat/completions", R"({"messages":[]})", 400},
      {"POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})", 400},
      {"POST", "/v1/completions", R"({"prompt":[1],"max_tokens":100000000})", 400},
      {"POST", "/v1/completions", "{\"prompt\":\"" + std::string(5000, 'a') + "\"}", 413},
      {"GET", "/v1/nothing", "", 404},
      {"GET", "/v1/models/other", "", 404},
  };
  for (const ErrorCase& c : cases) {
    const HttpResult r = HttpRequest("127.0.0.1", s.port, c.method, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.path << " " << c.body.substr(0, 80) << ": " << r.body;
    const json body = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << r.body;
    ASSERT_TRUE(body.contains("error")) << r.body;
    EXPECT_TRUE(body["error"]["message"].is_string()) << r.body;
    EXPECT_FALSE(body["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(body["error"]["type"].is_string()) << r.body;
  }
  EXPECT_EQ(
      json::parse(s.Post("/v1/completions", Requests()[0]).body)["choices"][0]["finish_reason"],
      "length");
  const HttpResult context =
      s.Post("/v1/completions", {{"prompt", {1, 2}}, {"max_tokens", s.Context()}});
  EXPECT_EQ(context.status, 400);
  EXPECT_EQ(json::parse(context.body)["error"]["code"], "context_length_exceeded");
}

TEST(ServeServer, ModelsHealthAndMetrics) {
  ServerOptions options = SmallBatches();
  options.model_name = "tiny";
  RunningServer s(TinyModel("25%"), options);
  const json models = json::parse(s.Get("/v1/models").body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(json::parse(s.Get("/v1/models/tiny").body)["id"], "tiny");
  EXPECT_EQ(s.Get("/health").status, 200);
  ASSERT_EQ(s.Post("/v1/completions", Requests()[0]).status, 200);
  EXPECT_EQ(s.PostRaw("/v1/completions", "{").status, 400);
  // A request names the served model or none; another name is not answered by this one.
  json other = Requests()[0];
  other["model"] = "gpt-4";
  const HttpResult wrong = s.Post("/v1/completions", other);
  EXPECT_EQ(wrong.status, 404);
  EXPECT_EQ(json::parse(wrong.body)["error"]["code"], "model_not_found");
  EXPECT_NE(wrong.body.find("'tiny'"), std::string::npos) << wrong.body;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // Offload snapshot refresh.
  const HttpResult m = s.Get("/metrics");
  ASSERT_EQ(m.status, 200);
  for (const char* line :
       {"moex_requests_total{endpoint=\"completions\",status=\"200\"} 1",
        "moex_requests_total{endpoint=\"completions\",status=\"400\"} 1",
        "moex_requests_total{endpoint=\"completions\",status=\"404\"} 1",
        "moex_completion_tokens_total 9", "moex_prompt_tokens_total 4", "moex_preparing_requests 0",
        "moex_time_to_first_token_seconds_count 1", "moex_running_requests 0",
        "moex_prefill_deferred_total 0",  // One request: no decode to wait for.
        "moex_offload_hits_total{layer=\"0\"}", "moex_offload_misses_total{layer=\"1\"}"})
    EXPECT_NE(m.body.find(line), std::string::npos) << line << "\n" << m.body;
}

TEST(ServeServer, ApiKeyGuardsEverythingButHealth) {
  ServerOptions options = SmallBatches();
  options.api_key = "sekret";
  RunningServer s(TinyModel(), options);
  const std::string body = Requests()[1].dump();
  const HttpResult denied = HttpRequest("127.0.0.1", s.port, "POST", "/v1/completions", body);
  EXPECT_EQ(denied.status, 401) << denied.error;
  EXPECT_EQ(json::parse(denied.body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(
      HttpRequest("127.0.0.1", s.port, "GET", "/v1/models", "", {"Authorization: Bearer x"}).status,
      401);
  EXPECT_EQ(HttpRequest("127.0.0.1", s.port, "POST", "/v1/completions", body,
                        {"Authorization: Bearer sekret"})
                .status,
            200);
  EXPECT_EQ(s.Get("/health").status, 200);
  EXPECT_EQ(s.Get("/metrics").status, 401);
  EXPECT_EQ(s.Get("/moex/cache").status, 401);
  EXPECT_EQ(s.Get("/moex/cache", {"Authorization: Bearer sekret"}).status, 200);
  EXPECT_EQ(s.Get("/").status, 200);  // The page holds no data; what it shows needs the key.
}

// GET / is the web page (no key needed: it holds no data); GET /moex/cache is what it draws.
// After one request, every MoE layer saw each of its tokens top_k times, and under
// offloading each distinct expert of a gate was a hit or a miss of the cache.
TEST(ServeServer, CacheViewAndWebPage) {
  ServerOptions options = SmallBatches();
  options.api_key = "k";
  RunningServer s(TinyModel("25%"), options);
  const std::vector<std::string> key = {"Authorization: Bearer k"};
  const HttpResult page = s.Get("/");
  ASSERT_EQ(page.status, 200);
  // Byte for byte the page under src/, as embedded at build time.
  EXPECT_EQ(page.body, testing::ReadFile(testing::SourceDir() / "src/serve/web/index.html"));
  EXPECT_NE(page.body.find("<title>moex</title>"), std::string::npos);
  EXPECT_NE(page.body.find("/moex/cache"), std::string::npos);
  EXPECT_NE(page.body.find("/v1/chat/completions"), std::string::npos);
  EXPECT_EQ(s.Get("/moex/cache").status, 401);

  const json before = json::parse(s.Get("/moex/cache", key).body);
  const ModelConfig& config = s.session->transformer->model().config;
  int moe_layers = 0;
  for (int l = 0; l < config.num_layers; ++l) moe_layers += config.IsMoeLayer(l) ? 1 : 0;
  ASSERT_EQ(before["layers"].size(), static_cast<size_t>(moe_layers));
  EXPECT_EQ(before["offloaded"], true);
  EXPECT_EQ(before["policy"], "lru");
  EXPECT_EQ(before["num_experts"], config.num_experts);
  for (const json& layer : before["layers"])
    for (int64_t n : layer["activations"]) EXPECT_EQ(n, 0);

  // 4 prompt tokens in one chunk, then 8 decode passes: 12 tokens through every gate.
  const json& request = Requests()[0];
  ASSERT_EQ(request["prompt"].size(), 4u);
  ASSERT_EQ(request["max_tokens"], 9);
  ASSERT_EQ(HttpRequest("127.0.0.1", s.port, "POST", "/v1/completions", request.dump(), key).status,
            200);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // Snapshot refresh.
  const json after = json::parse(s.Get("/moex/cache", key).body);
  EXPECT_EQ(after["model"], "moex");
  EXPECT_EQ(after["running"], 0);
  EXPECT_EQ(after["queue"], 0);
  EXPECT_GT(after["resident_bytes"].get<int64_t>(), 0);
  EXPECT_LE(after["resident_bytes"].get<int64_t>(), after["budget_bytes"].get<int64_t>());
  int64_t hits = 0, misses = 0, partly_resident = 0, cells = 0;
  for (const json& layer : after["layers"]) {
    int64_t activations = 0;
    for (int64_t n : layer["activations"]) activations += n;
    EXPECT_EQ(activations, 12 * config.num_experts_per_tok) << layer.dump();
    // Each pass's distinct experts: at least top_k, at most all its slots.
    const int64_t accesses = layer["hits"].get<int64_t>() + layer["misses"].get<int64_t>();
    EXPECT_GE(accesses, 9 * config.num_experts_per_tok);
    EXPECT_LE(accesses, 12 * config.num_experts_per_tok);
    EXPECT_GT(layer["misses"].get<int64_t>(), 0);
    hits += layer["hits"].get<int64_t>();
    misses += layer["misses"].get<int64_t>();
    for (double share : layer["resident"]) {
      EXPECT_GE(share, 0.0);
      EXPECT_LE(share, 1.0);
      partly_resident += share > 0 ? 1 : 0;
      ++cells;
    }
  }
  EXPECT_EQ(after["hits"], hits);
  EXPECT_EQ(after["misses"], misses);
  EXPECT_GT(partly_resident, 0);
  EXPECT_LT(partly_resident, cells);  // 25 % cannot hold every expert.
}

// Fully resident: every expert is whole in memory and every access is a hit.
TEST(ServeServer, CacheViewOfAResidentModel) {
  RunningServer s(TinyModel(), SmallBatches());
  ASSERT_EQ(s.Post("/v1/completions", Requests()[1]).status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const json view = json::parse(s.Get("/moex/cache").body);
  EXPECT_EQ(view["offloaded"], false);
  EXPECT_EQ(view["policy"], "resident");
  EXPECT_EQ(view["misses"], 0);
  EXPECT_GT(view["hits"].get<int64_t>(), 0);
  EXPECT_DOUBLE_EQ(view["hit_rate"].get<double>(), 1.0);
  const int top_k = s.session->transformer->model().config.num_experts_per_tok;
  for (const json& layer : view["layers"]) {
    int64_t activations = 0;
    for (int64_t n : layer["activations"]) activations += n;
    EXPECT_EQ(activations, (1 + 6) * top_k);  // 1 prompt token, 6 fed-back tokens.
    for (double share : layer["resident"]) EXPECT_EQ(share, 1.0);
  }
}

// Waits (bounded) until the scheduler has `n` running requests.
bool WaitForRunning(Server& server, int n) {
  for (int i = 0; i < 1000; ++i) {
    if (server.scheduler().running() == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(ServeServer, FullQueueIs429AndADisconnectFreesTheSlot) {
  ServerOptions options = SmallBatches();
  options.scheduler.max_running = 1;
  options.scheduler.max_queue = 0;
  RunningServer s(TinyModel(), options);
  json forever = Completion({1, 2, 3}, s.Context() - 3);
  forever["stream"] = true;
  std::atomic<bool> streaming{false}, hang_up{false};
  std::thread client([&] {
    s.Post("/v1/completions", forever, [&](const std::string&) {
      streaming = true;
      return !hang_up;
    });
  });
  for (int i = 0; i < 1000 && !streaming; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(streaming);
  const HttpResult refused = s.Post("/v1/completions", Requests()[1]);
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(json::parse(refused.body)["error"]["type"], "rate_limit_error");
  hang_up = true;
  client.join();
  EXPECT_TRUE(WaitForRunning(*s.server, 0)) << "the abandoned request still runs";
  EXPECT_EQ(s.Post("/v1/completions", Requests()[1]).status, 200);
}

TEST(ServeServer, ShutdownFinishesTheRunningRequests) {
  RunningServer s(TinyModel(), SmallBatches());
  json request = Completion({1, 2, 3}, 300);
  request["stream"] = true;
  std::atomic<bool> streaming{false};
  HttpResult result;
  std::thread client([&] {
    result = s.Post("/v1/completions", request, [&](const std::string&) {
      streaming = true;
      return true;
    });
  });
  for (int i = 0; i < 1000 && !streaming; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(streaming);
  s.server->Shutdown(30);
  client.join();
  ASSERT_EQ(result.status, 200);
  ASSERT_GE(result.events.size(), 2u);
  EXPECT_EQ(result.events.back(), "[DONE]");
  const json last = json::parse(result.events[result.events.size() - 2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  int tokens = 0;
  for (size_t i = 0; i + 1 < result.events.size(); ++i)
    tokens += static_cast<int>(json::parse(result.events[i])["choices"][0]["token_ids"].size());
  EXPECT_EQ(tokens, 300);
  // New requests are refused while draining / after.
  EXPECT_NE(s.Post("/v1/completions", Requests()[0]).status, 200);
}

TEST(ServeServer, TimeoutIs504) {
  ServerOptions options = SmallBatches();
  // One microsecond: over after the first pass however fast the machine (a 50 ms limit let
  // an idle machine finish all 511 tokens in time).
  options.scheduler.timeout_s = 1e-6;
  RunningServer s(TinyModel(), options);
  const HttpResult r = s.Post("/v1/completions", Completion({1}, s.Context() - 1));
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_TRUE(json::parse(r.body).contains("error"));
}

// A model whose logits are NaN fails its request with an error; the server keeps serving.
TEST(ServeServer, NonFiniteLogitsFailTheRequestNotTheServer) {
  testing::TempDir dir;
  std::filesystem::copy(testing::TinyModelPath(Arch::kOlmoe, DType::kF32), dir.path() / "m",
                        std::filesystem::copy_options::recursive);
  testing::PoisonTensorWithNaN(dir / "m/model.safetensors", "model.norm.weight");
  cli::ModelOptions m = TinyModel();
  m.model = dir / "m";
  RunningServer s(m, SmallBatches());
  const HttpResult r = s.Post("/v1/completions", Completion({1, 2, 3}, 4));
  EXPECT_GE(r.status, 500) << r.body;
  EXPECT_NE(r.body.find("non-finite logit"), std::string::npos) << r.body;
  EXPECT_EQ(s.Get("/health").status, 200);
}

// The demo model: text prompts, chat, stop sequences, streamed chat deltas.
TEST(ServeDemoModel, ChatAndTextCompletions) {
  cli::ModelOptions model;
  model.model = kDemo;
  RunningServer s(model, SmallBatches());
  const json chat = {
      {"model", "moex"},
      {"messages", {{{"role", "user"}, {"content", "What is the capital of France?"}}}},
      {"max_tokens", 24},
      {"temperature", 0}};
  const HttpResult r = s.Post("/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  const std::string content = body["choices"][0]["message"]["content"];
  EXPECT_FALSE(content.empty());
  EXPECT_EQ(body["usage"]["completion_tokens"], body["choices"][0]["token_ids"].size());

  // Streamed chat: role first, then content deltas that add up to the same text.
  json stream = chat;
  stream["stream"] = true;
  const HttpResult sr = s.Post("/v1/chat/completions", stream);
  ASSERT_EQ(sr.status, 200);
  std::string streamed;
  EXPECT_EQ(json::parse(sr.events.front())["choices"][0]["delta"]["role"], "assistant");
  for (size_t i = 0; i + 1 < sr.events.size(); ++i) {
    const json c = json::parse(sr.events[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    streamed += c["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(streamed, content);

  // A stop sequence taken from the middle of the free text cuts it there.
  const json plain = {
      {"prompt", "The history of the city"}, {"max_tokens", 32}, {"temperature", 0}};
  const std::string text = json::parse(s.Post("/v1/completions", plain).body)["choices"][0]["text"];
  ASSERT_GT(text.size(), 12u) << text;
  const std::string stop = text.substr(text.size() / 2, 3);
  json stopped = plain;
  stopped["stop"] = {stop};
  const json cut = json::parse(s.Post("/v1/completions", stopped).body);
  EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
}

// logit_bias and the penalties reach the sampler: +100 on one token makes a greedy reply
// that token throughout; -100 on the first token of the plain reply changes it; a frequency
// penalty changes a reply that repeats a token.
TEST(ServeServer, LogitBiasAndPenaltiesShapeTheReply) {
  RunningServer s(TinyModel(), SmallBatches());
  json r = Completion({5, 9, 200, 31}, 8);
  const std::vector<int32_t> plain = TokenIds(s.Post("/v1/completions", r));
  ASSERT_EQ(plain.size(), 8u);
  json forced = r;
  forced["logit_bias"] = {{"77", 100}};
  EXPECT_EQ(TokenIds(s.Post("/v1/completions", forced)), std::vector<int32_t>(8, 77));
  json banned = r;
  banned["logit_bias"] = {{std::to_string(plain[0]), -100}};
  const std::vector<int32_t> other = TokenIds(s.Post("/v1/completions", banned));
  ASSERT_FALSE(other.empty());
  EXPECT_NE(other[0], plain[0]);
  for (int32_t t : other) EXPECT_NE(t, plain[0]);
  // With +8 on token 77 the greedy reply is that token throughout; presence and frequency
  // penalties of 2 take 4 from it after its first use and 2 more per use, and it gives way.
  json repeat = r;
  repeat["logit_bias"] = {{"77", 8}};
  EXPECT_EQ(TokenIds(s.Post("/v1/completions", repeat)), std::vector<int32_t>(8, 77));
  repeat["frequency_penalty"] = 2;
  repeat["presence_penalty"] = 2;
  const std::vector<int32_t> penalised = TokenIds(s.Post("/v1/completions", repeat));
  EXPECT_EQ(penalised[0], 77);
  EXPECT_LT(std::count(penalised.begin(), penalised.end(), 77), 8) << json(penalised).dump();
}

}  // namespace
}  // namespace moex::serve

namespace moex::serve {
namespace {

// Listens to the event stream and slows every forward pass by 30 ms.
class SlowPasses : public policy::EventSink {
 public:
  void OnIterationBegin(const policy::IterationBeginEvent&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
};

// --drain-timeout holds whatever the work is: a request still running when the drain's time
// is up ends with a 503 error event, and Shutdown returns soon after, not when the request
// would have finished (each pass is slowed to 30 ms here: 300 tokens would take 9 s).
TEST(ServeShutdown, TheDrainTimeoutEndsWhatIsStillRunning) {
  RunningServer s(TinyModel(), SmallBatches());
  SlowPasses slow;
  s.session->transformer->AddSink(&slow);  // Before any pass runs.
  json request = Completion({5, 6, 7}, 300);
  request["ignore_eos"] = true;
  request["stream"] = true;
  std::atomic<bool> streaming{false};
  HttpResult streamed;
  std::thread client([&] {
    streamed = s.Post("/v1/completions", request, [&](const std::string&) {
      streaming = true;
      return true;
    });
  });
  for (int i = 0; i < 2000 && !streaming; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto start = std::chrono::steady_clock::now();
  s.server->Shutdown(0.3);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  client.join();
  s.session->transformer->RemoveSink(&slow);  // The scheduler has stopped.
  EXPECT_LT(took, 2.0);
  ASSERT_GE(streamed.events.size(), 2u);
  EXPECT_EQ(streamed.events.back(), "[DONE]");
  const json error = json::parse(streamed.events[streamed.events.size() - 2]);
  EXPECT_NE(error["error"]["message"].get<std::string>().find("--drain-timeout"), std::string::npos)
      << error;
  EXPECT_EQ(error["error"]["type"], "server_error") << error;
}

// A checkpoint's chat template that loops for long (up to its step budget) is cut short by
// the request's --timeout: 504, not a thread pinned until the budget runs out.
TEST(ServeShutdown, ARenderingTemplateHonoursTheRequestTimeout) {
  testing::TempDir dir;
  const std::filesystem::path model = dir.path() / "slow-template";
  std::filesystem::copy(testing::TinyModelPath(Arch::kOlmoe), model);
  const ModelConfig shape = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  ByteTokenizerFiles files =
      ByteLevelTokenizerFor(static_cast<int>(shape.vocab_size), shape.bos_token_id, shape.eos_token_ids);
  files.config["chat_template"] =
      "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}";
  std::ofstream(model / "tokenizer.json") << files.tokenizer.dump();
  std::ofstream(model / "tokenizer_config.json") << files.config.dump();
  cli::ModelOptions options;
  options.model = model.string();
  ServerOptions server = SmallBatches();
  server.scheduler.timeout_s = 0.05;
  RunningServer s(options, server);
  const auto start = std::chrono::steady_clock::now();
  const HttpResult r = s.Post(
      "/v1/chat/completions",
      {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_NE(r.body.find("chat template"), std::string::npos) << r.body;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace
}  // namespace moex::serve

namespace moex::serve {
namespace {

// Sends `request` as raw bytes and returns what comes back before the server closes (or
// `wait` passes).
std::string RawExchange(int port, const std::string& request, std::chrono::seconds wait) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "connect failed";
  }
  timeval tv{static_cast<time_t>(wait.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
    reply.append(buf, static_cast<size_t>(n));
    if (reply.find("\r\n\r\n") != std::string::npos && reply.find("}}") != std::string::npos) break;
  }
  ::close(fd);
  return reply;
}

// A Content-Length that is negative, not a number or absurdly large is answered at once (it
// waited out the 30 s read timeout for bytes that never came, then said 413).
TEST(ServeServer, UnsetSamplingTakesTheModelsDefaults) {
  // The tiny model's generation_config.json has do_sample false: greedy, whatever the seed
  // (OpenAI's temperature 1 would sample).
  RunningServer s(TinyModel(), ServerOptions{});
  auto tokens = [&](json body) {
    body["prompt"] = {5, 6, 7};
    body["max_tokens"] = 12;
    body["ignore_eos"] = true;
    const HttpResult r = s.Post("/v1/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body)["choices"][0]["token_ids"];
  };
  const json greedy = tokens({{"temperature", 0}});
  EXPECT_EQ(tokens({{"seed", 1}}), greedy);
  EXPECT_EQ(tokens({{"seed", 2}}), greedy);
}

TEST(ServeServer, ABadContentLengthIsAnsweredAtOnce) {
  RunningServer s(TinyModel(), SmallBatches());
  for (const auto& [value, status, message] :
       {std::tuple{"-5", "400", "is not a byte count"},
        std::tuple{"12abc", "400", "is not a byte count"},
        std::tuple{"99999999999999999999", "400", "is not a byte count"},
        std::tuple{"18446744073709551615", "413", "over the 8388608-byte body limit"}}) {
    const auto start = std::chrono::steady_clock::now();
    const std::string reply = RawExchange(
        s.port,
        std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n") +
            "Content-Length: " + value + "\r\n\r\n{}",
        std::chrono::seconds(10));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3)) << value;
    EXPECT_EQ(reply.substr(0, 12), std::string("HTTP/1.1 ") + status) << value << ": " << reply;
    EXPECT_NE(reply.find(message), std::string::npos) << value << ": " << reply;
  }
  EXPECT_EQ(s.Post("/v1/completions", Requests()[1]).status, 200);
}

}  // namespace
}  // namespace moex::serve

namespace moex::serve {
namespace {

// logprobs on both endpoints, whole and streamed: one entry per generated token (not the
// stop token), the greedy token is the most likely alternative, the pieces spell the text.
TEST(ServeDemoModel, LogprobsOfEveryGeneratedToken) {
  cli::ModelOptions model;
  model.model = kDemo;
  RunningServer s(model, SmallBatches());
  const json chat = {{"messages", {{{"role", "user"}, {"content", "What is the capital of France?"}}}},
                     {"max_tokens", 12},
                     {"temperature", 0},
                     {"logprobs", true},
                     {"top_logprobs", 3}};
  const HttpResult r = s.Post("/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body);
  const json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_TRUE(content.is_array()) << r.body;
  ASSERT_FALSE(content.empty());
  std::string spelled;
  for (const json& e : content) {
    spelled += e["token"].get<std::string>();
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    EXPECT_EQ(e["token"], e["top_logprobs"][0]["token"]) << "greedy: the most likely token";
    EXPECT_DOUBLE_EQ(e["logprob"].get<double>(), e["top_logprobs"][0]["logprob"].get<double>());
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(),
              e["top_logprobs"][1]["logprob"].get<double>());
    std::string from_bytes;
    for (const json& b : e["bytes"]) from_bytes += static_cast<char>(b.get<int>());
    EXPECT_EQ(from_bytes, e["token"]);
  }
  EXPECT_EQ(spelled, body["choices"][0]["message"]["content"]);
  const int64_t completion = body["usage"]["completion_tokens"];
  EXPECT_TRUE(static_cast<int64_t>(content.size()) == completion ||
              static_cast<int64_t>(content.size()) == completion - 1)
      << "every token but a final stop token";

  // Streamed: the chunks' entries together are the whole reply's.
  json streamed_request = chat;
  streamed_request["stream"] = true;
  const HttpResult st = s.Post("/v1/chat/completions", streamed_request);
  ASSERT_EQ(st.status, 200);
  json joined = json::array();
  for (const std::string& ev : st.events) {
    if (ev == "[DONE]") continue;
    const json c = json::parse(ev)["choices"][0];
    if (!c["logprobs"].is_null())
      for (const json& e : c["logprobs"]["content"]) joined.push_back(e);
  }
  EXPECT_EQ(joined, content);

  // Completions: tokens, token_logprobs, top_logprobs as {token: logprob}, text offsets.
  const HttpResult c = s.Post("/v1/completions", {{"prompt", "The capital of France is"},
                                                  {"max_tokens", 6},
                                                  {"temperature", 0},
                                                  {"logprobs", 2}});
  ASSERT_EQ(c.status, 200) << c.body;
  const json choice = json::parse(c.body)["choices"][0];
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
  ASSERT_EQ(lp["tokens"].size(), lp["text_offset"].size());
  std::string text;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), text.size());
    text += lp["tokens"][i].get<std::string>();
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
    EXPECT_TRUE(lp["top_logprobs"][i].contains(lp["tokens"][i].get<std::string>()));
  }
  EXPECT_EQ(text.substr(0, choice["text"].get<std::string>().size()), choice["text"]);
  // Not asked: null, as OpenAI sends it.
  EXPECT_TRUE(json::parse(s.Post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}}).body)
                  ["choices"][0]["logprobs"]
                      .is_null());
}

}  // namespace
}  // namespace moex::serve

namespace moex::serve {
namespace {

// n choices: choice i is what a lone request with seed + i gives, the prompt is prefilled
// once (choices 1.. restore all but its last token from the prefix cache), usage counts the
// prompt once; streamed, each chunk carries one choice's index.
TEST(ServeServer, NChoicesShareThePromptAndMatchLoneRequests) {
  RunningServer s(TinyModel(), SmallBatches());
  const std::vector<int32_t> prompt = {5, 9, 200, 31, 7, 7, 8, 100};
  json request = Completion(prompt, 6, 0.9, 41);
  request["n"] = 3;
  const HttpResult r = s.Post("/v1/completions", request);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body);
  ASSERT_EQ(body["choices"].size(), 3u);
  const std::string metrics = s.Get("/metrics").body;
  // The first lookup of the n = 3 request misses; its two siblings reuse 7 tokens each.
  EXPECT_NE(metrics.find("moex_prefix_cache_tokens_total 14\n"), std::string::npos) << metrics;
  int64_t completion = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(body["choices"][i]["index"], i);
    const json lone = json::parse(s.Post("/v1/completions", Completion(prompt, 6, 0.9, 41 + i)).body);
    EXPECT_EQ(body["choices"][i]["token_ids"], lone["choices"][0]["token_ids"]) << "choice " << i;
    completion += static_cast<int64_t>(body["choices"][i]["token_ids"].size());
  }
  EXPECT_EQ(body["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(body["usage"]["completion_tokens"], completion);

  request["stream"] = true;
  const HttpResult st = s.Post("/v1/completions", request);
  ASSERT_EQ(st.status, 200);
  std::vector<std::vector<int32_t>> streamed(3);
  for (const std::string& ev : st.events) {
    if (ev == "[DONE]") continue;
    const json c = json::parse(ev)["choices"][0];
    for (const json& t : c["token_ids"]) streamed[c["index"].get<size_t>()].push_back(t);
  }
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(json(streamed[i]), body["choices"][i]["token_ids"]) << "choice " << i;
}

TEST(ServeDemoModel, EchoPutsThePromptBeforeTheReply) {
  cli::ModelOptions model;
  model.model = kDemo;
  RunningServer s(model, SmallBatches());
  const json plain = json::parse(
      s.Post("/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 4}, {"temperature", 0}})
          .body);
  const json echoed = json::parse(s.Post("/v1/completions", {{"prompt", "Once upon"},
                                                             {"max_tokens", 4},
                                                             {"temperature", 0},
                                                             {"echo", true}})
                                      .body);
  EXPECT_EQ(echoed["choices"][0]["text"],
            "Once upon" + plain["choices"][0]["text"].get<std::string>());
}

}  // namespace
}  // namespace moex::serve

namespace moex::serve {
namespace {

// get_weather (a city, Oslo or Paris) and now (no parameters).
json WeatherTools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"enum": ["Oslo", "Paris"]}},
      "required": ["city"]}}}, {"type": "function", "function": {"name": "now"}}])");
}

// A chat request that forces a call to get_weather, sampled with `seed`.
json ForcedWeatherRequest(const json& tools, int max_tokens, int seed) {
  return {{"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}},
          {"tools", tools},
          {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0.7},
          {"seed", seed}};
}

// tool_choice naming a function: the reply is that call, its arguments valid for the
// function's schema, finish_reason tool_calls, content null; streamed, the call comes as one
// tool_calls delta; the call and its result sent back render and are answered.
TEST(ServeTools, ANamedToolChoiceGivesAValidCallWholeAndStreamed) {
  testing::TempDir dir;
  RunningServer s(testing::ToolTemplateModel(dir.path()), SmallBatches());

  const json tools = WeatherTools();
  json request = ForcedWeatherRequest(tools, 180, 3);
  const HttpResult r = s.Post("/v1/chat/completions", request);
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = json::parse(r.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << choice;
  EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
  const json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  const json arguments = json::parse(call["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(arguments["city"] == "Oslo" || arguments["city"] == "Paris") << arguments;

  request["stream"] = true;
  const HttpResult st = s.Post("/v1/chat/completions", request);
  ASSERT_EQ(st.status, 200);
  json streamed_call, finish;
  std::string content;
  for (const std::string& ev : st.events) {
    if (ev == "[DONE]") continue;
    const json c = json::parse(ev)["choices"][0];
    if (c["delta"].contains("tool_calls")) streamed_call = c["delta"]["tool_calls"][0];
    if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(content, "") << "nothing but the call";
  EXPECT_EQ(streamed_call["index"], 0);
  EXPECT_EQ(streamed_call["function"], call["function"]) << "same seed, same call";

  // The loop's next turn: the call and its result go back; the reply is plain text.
  json next = {{"messages",
                {{{"role", "user"}, {"content", "Weather in Oslo?"}},
                 {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}},
                 {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "sunny"}}}},
               {"tools", tools},
               {"tool_choice", "none"},
               {"max_tokens", 4}};
  EXPECT_EQ(s.Post("/v1/chat/completions", next).status, 200);
  next["messages"][2]["tool_call_id"] = "call_other";
  const HttpResult unmatched = s.Post("/v1/chat/completions", next);
  EXPECT_EQ(unmatched.status, 400);
  EXPECT_EQ(json::parse(unmatched.body)["error"]["param"], "messages[2].tool_call_id");
  // A parameters schema the grammar cannot compile, when a call is forced: 400 naming tools.
  json unsupported = request;
  unsupported.erase("stream");
  unsupported["tools"][0]["function"]["parameters"] = {{"not", json::object()}};
  const HttpResult refused = s.Post("/v1/chat/completions", unsupported);
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(json::parse(refused.body)["error"]["param"], "tools");
}

// Posts `request`, which forces a call to get_weather (city Oslo or Paris), and expects that one
// call, whole and streamed with the same seed; returns it.
json ExpectWeatherCall(const RunningServer& s, json request) {
  const HttpResult r = s.Post("/v1/chat/completions", request);
  EXPECT_EQ(r.status, 200) << r.body;
  const json choice = json::parse(r.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << choice;
  if (!choice["message"].contains("tool_calls") || choice["message"]["tool_calls"].size() != 1) {
    ADD_FAILURE() << "not one call: " << choice;
    return json();
  }
  const json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  const json arguments = json::parse(call["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(arguments["city"] == "Oslo" || arguments["city"] == "Paris") << arguments;
  request["stream"] = true;
  const HttpResult st = s.Post("/v1/chat/completions", request);
  EXPECT_EQ(st.status, 200);
  json streamed;
  for (const std::string& ev : st.events)
    if (ev != "[DONE]" && json::parse(ev)["choices"][0]["delta"].contains("tool_calls"))
      streamed = json::parse(ev)["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(streamed["function"], call["function"]) << "same seed, same call";
  return call;
}

// Templates in DeepSeek V3's form (calls rendered, the tool list not: the server writes it
// into the system prompt; arguments as text), GLM's (<arg_key> pairs) and MiniMax-M2's
// (<invoke> blocks): a forced call is valid whole and streamed, and the loop's next turn
// renders the call as the template asks.
TEST(ServeTools, DeepSeekGlmAndMiniMaxFormsEndToEnd) {
  const std::string deepseek =
      "{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}"
      "{% elif m.role == 'user' %}<｜User｜>{{ m.content }}{% elif m.role == 'assistant' %}"
      "<｜Assistant｜>{% if m.tool_calls %}<｜tool▁calls▁begin｜>{% for c in m.tool_calls %}"
      "{{ '<｜tool▁call▁begin｜>' + c.type + '<｜tool▁sep｜>' + c.function.name + "
      "'\\n```json\\n' + c.function.arguments + '\\n```<｜tool▁call▁end｜>' }}{% endfor %}"
      "<｜tool▁calls▁end｜>{% else %}{{ m.content }}{% endif %}<｜end▁of▁sentence｜>"
      "{% else %}<｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜>{% endif %}"
      "{% endfor %}{% if add_generation_prompt %}<｜Assistant｜>{% endif %}";
  const std::string glm =
      "{% if tools %}<|system|>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}"
      "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% if m.tool_calls %}"
      "{% for c in m.tool_calls %}\n<tool_call>{{ c.function.name }}"
      "{% for k, v in c.function.arguments.items() %}\n<arg_key>{{ k }}</arg_key>\n"
      "<arg_value>{{ v | tojson if v is not string else v }}</arg_value>{% endfor %}\n"
      "</tool_call>{% endfor %}{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}";
  const std::string minimax =
      "{% if tools %}]~b]system\n<tools>{% for t in tools %}{{ t.function | tojson }}\n"
      "{% endfor %}</tools>[e~[\n{% endif %}{% for m in messages %}]~b]{{ m.role }}\n"
      "{{ m.content }}{% if m.tool_calls %}{{ '\\n<minimax:tool_call>\\n' }}"
      "{% for c in m.tool_calls %}{{ '<invoke name=\"' + c.function.name + '\">\\n' }}"
      "{% for k, v in c.function.arguments.items() %}{{ '<parameter name=\"' + k + '\">' }}"
      "{{ v | tojson if v is not string else v }}{{ '</parameter>\\n' }}{% endfor %}"
      "{{ '</invoke>\\n' }}{% endfor %}{{ '</minimax:tool_call>' }}{% endif %}[e~[\n"
      "{% endfor %}{% if add_generation_prompt %}]~b]ai\n{% endif %}";
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "The weather in a city", "parameters": {"type": "object", "properties":
      {"city": {"enum": ["Oslo", "Paris"]}, "days": {"type": "integer", "minimum": 1,
      "maximum": 3}}, "required": ["city", "days"]}}}])");
  for (const auto& [name, chat_template, rendered_call] :
       {std::tuple<std::string, std::string, std::string>{
            "deepseek", deepseek,
            "<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\", "
            "\"days\": 2}\n```<｜tool▁call▁end｜>"},
        // HF's trim_blocks drops the newline after each {% %} tag.
        {"glm", glm,
         "<tool_call>get_weather<arg_key>city</arg_key>\n<arg_value>Oslo"
         "</arg_value><arg_key>days</arg_key>\n<arg_value>2</arg_value></tool_call>"},
        {"minimax", minimax,
         "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo"
         "</parameter>\n<parameter "
         "name=\"days\">2</parameter>\n</invoke>\n</minimax:tool_call>"}}) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    ServerOptions options = SmallBatches();
    options.compact_json = true;  // A random model's whitespace would not end (docs/grammar.md).
    RunningServer s(testing::ToolTemplateModel(dir.path(), chat_template), options);
    json request = {{"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}},
                    {"tools", tools},
                    {"tool_choice", "required"},
                    {"max_tokens", 250},
                    {"temperature", 0.7},
                    {"seed", 3}};
    const json call = ExpectWeatherCall(s, request);
    ASSERT_FALSE(call.is_null());
    const json arguments = json::parse(call["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(arguments["days"].is_number_integer() && arguments["days"] >= 1 &&
                arguments["days"] <= 3)
        << arguments;

    // The next turn, as the template renders it: the tool list (the server's, for DeepSeek's
    // form), then the call in the format.
    const json next = {
        {"messages",
         {{{"role", "user"}, {"content", "Weather in Oslo?"}},
          {{"role", "assistant"},
           {"content", nullptr},
           {"tool_calls",
            {{{"id", "call_1"},
              {"type", "function"},
              {"function",
               {{"name", "get_weather"}, {"arguments", R"({"city": "Oslo", "days": 2})"}}}}}}},
          {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}}},
        {"tools", tools},
        {"max_tokens", 4}};
    const std::vector<int32_t> ids =
        s.server->PromptTokens(ParseApiRequest(Endpoint::kChat, next.dump(), ApiLimits{}));
    const std::string prompt = s.session->tokenizer->Decode(ids);
    EXPECT_NE(prompt.find(rendered_call), std::string::npos) << prompt;
    EXPECT_NE(prompt.find("The weather in a city"), std::string::npos) << prompt;
    EXPECT_EQ(s.Post("/v1/chat/completions", next).status, 200);
  }
}

// gpt-oss's harmony: a forced call is a commentary message to the function (its special
// tokens allowed whole: ToolCalls.AHarmonyCallGrammarAllowsItsSpecialTokens); every chat
// reply is parsed as channels, tools or not; the call goes back in the template's form.
TEST(ServeTools, HarmonyEndToEnd) {
  testing::TempDir dir;
  ServerOptions options = SmallBatches();
  options.compact_json = true;
  RunningServer s(testing::HarmonyModel(dir.path()), options);
  const json tools = WeatherTools();
  const json request = ForcedWeatherRequest(tools, 120, 4);
  const json call = ExpectWeatherCall(s, request);
  ASSERT_FALSE(call.is_null());

  // Without tools the reply is parsed all the same: no raw markers reach the client.
  const json plain = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                      {"max_tokens", 24},
                      {"temperature", 1.0},
                      {"seed", 1}};
  const HttpResult p = s.Post("/v1/chat/completions", plain);
  ASSERT_EQ(p.status, 200) << p.body;
  const json message = json::parse(p.body)["choices"][0]["message"];
  EXPECT_FALSE(message.contains("tool_calls")) << message;
  if (message["content"].is_string()) {
    EXPECT_EQ(message["content"].get<std::string>().find("<|message|>"), std::string::npos);
  }

  const json next = {{"messages",
                      {{{"role", "user"}, {"content", "Weather in Oslo?"}},
                       {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}},
                       {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "sunny"}}}},
                     {"tools", tools},
                     {"max_tokens", 4}};
  const std::string prompt = s.session->tokenizer->Decode(
      s.server->PromptTokens(ParseApiRequest(Endpoint::kChat, next.dump(), ApiLimits{})));
  EXPECT_NE(prompt.find("commentary to=functions.get_weather"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("type get_weather = (_: "), std::string::npos) << prompt;
  EXPECT_EQ(s.Post("/v1/chat/completions", next).status, 200);
}

TEST(ServeTools, AModelWithoutAToolTemplateRefusesTools) {
  cli::ModelOptions model;
  model.model = kDemo;
  RunningServer s(model, SmallBatches());
  const HttpResult r = s.Post(
      "/v1/chat/completions",
      {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
       {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "tools") << r.body;
}

}  // namespace
}  // namespace moex::serve

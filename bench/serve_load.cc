// Load generator for `moex serve`: streaming chat requests with prompts from a prompt set,
// either closed-loop (--clients N, each sends its next request when the last one ends) or
// open-loop on an arrival trace (--arrivals, the Azure LLM inference trace CSV: arrival
// times divided by --time-scale, or scaled to a mean of --rate requests per second; output
// lengths from GeneratedTokens capped by --max-tokens).
// Reports throughput and TTFT / TPOT / latency percentiles, one JSON object with --json.
// Any OpenAI-compatible server can be driven (llama.cpp's llama-server included): tokens are
// counted from moex's `token_ids` when a chunk has them, else one per non-empty chunk, and
// the final `usage.completion_tokens` wins when the server sends it. `--endpoint completions`
// sends the prompt text to /v1/completions, so that two servers with the same vocabulary see
// the same prompt tokens whatever their chat templates. `--turns N` makes each request a
// conversation of N turns, each re-sending the history (the earlier prompts and replies) with
// the next prompt appended, as chat clients do; `--prompt-offset` starts at another prompt.
//
//   serve_load --port 8080 --prompts ../shared/data/prompts/sharegpt_v3_filtered_500.json
//       --clients 4 --requests 64 --max-tokens 64 --json
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "io/prompt_set.h"
#include "serve/http_client.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string prompts;
  std::string arrivals;
  double time_scale = 1.0;  // Trace inter-arrival times are divided by this.
  double rate = 0;          // > 0: the time scale that gives this mean arrival rate (req/s).
  int clients = 1;
  int requests = 32;
  double duration_s = 0;  // Closed loop: stop sending after this long (0: --requests).
  int max_tokens = 64;
  size_t max_prompt_chars = 2000;
  bool ignore_eos = true;  // Output lengths as asked, so runs are comparable.
  std::string api_key;
  std::string endpoint = "chat";  // chat (/v1/chat/completions) or completions.
  int turns = 1;                  // Turns per conversation (each a request).
  int prompt_offset = 0;          // First prompt of the set used.
  bool json = false;
};

struct Arrival {
  double at_s;
  int max_tokens;
};

struct Sample {
  bool ok = false;
  std::string error;
  double ttft_s = 0, latency_s = 0, tpot_s = 0;
  int64_t tokens = 0, prompt_tokens = 0;
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens, when sent.
  std::string text;           // The reply (the next turn re-sends it).
};

// The trace's first `count` arrivals, times from the first one, divided by `scale`.
std::vector<Arrival> LoadArrivals(const std::string& path, int count, double scale, int cap) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::string line;
  std::getline(in, line);  // TIMESTAMP,ContextTokens,GeneratedTokens
  std::vector<Arrival> out;
  double first = -1;
  while (static_cast<int>(out.size()) < count && std::getline(in, line)) {
    std::stringstream s(line);
    std::string stamp, context, generated;
    std::getline(s, stamp, ',');
    std::getline(s, context, ',');
    std::getline(s, generated, ',');
    // "2023-11-16 18:17:03.9799600": seconds within the day are enough for a trace slice.
    const double h = std::stod(stamp.substr(11, 2)), m = std::stod(stamp.substr(14, 2)),
                 sec = std::stod(stamp.substr(17));
    const double t = h * 3600 + m * 60 + sec;
    if (first < 0) first = t;
    out.push_back({(t - first) / scale, std::clamp(std::stoi(generated), 1, cap)});
  }
  if (out.empty()) throw std::runtime_error(path + " holds no arrivals");
  return out;
}

// The time scale at which `arrivals` (unscaled) come at `rate` per second on average.
double ScaleForRate(const std::vector<Arrival>& arrivals, double rate) {
  const double span = arrivals.back().at_s;
  if (arrivals.size() < 2 || span <= 0) return 1.0;
  return rate * span / static_cast<double>(arrivals.size() - 1);
}

// One request; with `history` (earlier turns as alternating user and assistant texts), a chat
// request sends them as messages before `prompt`, a completion request as one text.
Sample RunOne(const Options& o, const std::string& prompt, int max_tokens,
              const std::vector<std::string>& history = {}) {
  const bool chat = o.endpoint == "chat";
  // No "model": the servers compared answer to different names (moex checks it, 404).
  json body = {{"max_tokens", max_tokens},
               {"temperature", 0}, {"ignore_eos", o.ignore_eos},
               {"stream", true},   {"stream_options", {{"include_usage", true}}}};
  if (chat) {
    body["messages"] = json::array();
    for (size_t i = 0; i < history.size(); ++i)
      body["messages"].push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", history[i]}});
    body["messages"].push_back({{"role", "user"}, {"content", prompt}});
  } else {
    std::string text;
    for (const std::string& h : history) text += h + "\n\n";
    body["prompt"] = text + prompt;
  }
  std::vector<std::string> headers;
  if (!o.api_key.empty()) headers.push_back("Authorization: Bearer " + o.api_key);
  Sample s;
  const auto start = Clock::now();
  Clock::time_point first{}, last{};
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  bool done = false;
  int64_t usage_tokens = 0;
  const moex::serve::HttpResult r = moex::serve::HttpRequest(
      o.host, o.port, "POST", chat ? "/v1/chat/completions" : "/v1/completions", body.dump(),
      headers, [&](const std::string& data) {
        if (data == "[DONE]") {
          done = true;
          return true;
        }
        const json chunk = json::parse(data, nullptr, false);
        if (!chunk.is_object()) return true;
        if (chunk.contains("error")) {
          s.error = chunk["error"].value("message", "error event");
          return true;
        }
        if (chunk.contains("usage") && chunk["usage"].is_object()) {
          const json& usage = chunk["usage"];
          s.prompt_tokens = usage.value("prompt_tokens", 0);
          usage_tokens = usage.value("completion_tokens", int64_t{0});
          if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object())
            s.cached_tokens = usage["prompt_tokens_details"].value("cached_tokens", int64_t{0});
        }
        if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty())
          return true;
        const json& choice = chunk["choices"][0];
        const json text = chat ? choice.value("delta", json::object()).value("content", json())
                               : choice.value("text", json());
        if (text.is_string()) s.text += text.get<std::string>();
        int64_t n = 0;
        if (choice.contains("token_ids")) {
          n = static_cast<int64_t>(choice["token_ids"].size());
        } else {  // Another server: one token per chunk that carries text.
          n = text.is_string() && !text.get<std::string>().empty() ? 1 : 0;
        }
        if (n > 0) {
          last = Clock::now();
          if (s.tokens == 0) first = last;
          s.tokens += n;
        }
        return true;
      });
  if (usage_tokens > 0) s.tokens = usage_tokens;
  s.latency_s = seconds(Clock::now() - start);
  if (r.status != 200) {
    s.error = "HTTP " + std::to_string(r.status) + " " + r.error + " " + r.body.substr(0, 200);
    return s;
  }
  s.ok = done && s.error.empty() && s.tokens > 0;
  if (!s.ok && s.error.empty()) s.error = "stream ended without [DONE]";
  if (s.tokens > 0) s.ttft_s = seconds(first - start);
  if (s.tokens > 1) s.tpot_s = seconds(last - first) / static_cast<double>(s.tokens - 1);
  return s;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank)),
               hi = static_cast<size_t>(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"load generator for moex serve"};
  Options o;
  app.add_option("--host", o.host)->capture_default_str();
  app.add_option("--port", o.port)->capture_default_str();
  app.add_option("--prompts", o.prompts, "prompt set (ShareGPT, MT-Bench, GSM8K or text)")
      ->required();
  app.add_option("--arrivals", o.arrivals, "Azure arrival trace CSV (open loop)");
  app.add_option("--time-scale", o.time_scale, "divide the trace's inter-arrival times by this")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--rate", o.rate,
                 "scale the trace's times to this mean arrival rate, requests/s (replaces "
                 "--time-scale)")
      ->check(CLI::PositiveNumber);
  app.add_option("--clients", o.clients, "concurrent clients (closed loop)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--requests", o.requests, "requests (conversations, with --turns) to send")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--duration", o.duration_s, "closed loop: send for this many seconds instead");
  app.add_option("--max-tokens", o.max_tokens, "output tokens per request (cap, with --arrivals)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-prompt-chars", o.max_prompt_chars, "cut prompts to this many characters")
      ->capture_default_str();
  app.add_option("--api-key", o.api_key);
  app.add_option("--endpoint", o.endpoint, "chat or completions (prompt text, no chat template)")
      ->capture_default_str()
      ->check(CLI::IsMember({"chat", "completions"}));
  app.add_option("--turns", o.turns,
                 "turns per conversation: each re-sends the earlier prompts and replies")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--prompt-offset", o.prompt_offset, "index of the first prompt used")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", o.json, "print one JSON object");
  CLI11_PARSE(app, argc, argv);

  try {
    std::vector<moex::PromptEntry> prompts = moex::LoadPromptSet(o.prompts);
    for (auto& p : prompts)
      if (p.text.size() > o.max_prompt_chars) p.text.resize(o.max_prompt_chars);
    std::vector<Arrival> arrivals;
    if (!o.arrivals.empty()) {
      if (o.rate > 0)
        o.time_scale =
            ScaleForRate(LoadArrivals(o.arrivals, o.requests, 1.0, o.max_tokens), o.rate);
      arrivals = LoadArrivals(o.arrivals, o.requests, o.time_scale, o.max_tokens);
    }

    std::mutex mutex;
    std::vector<Sample> samples;
    std::atomic<int> next{0};
    const auto start = Clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
    auto record = [&](Sample s) {
      std::lock_guard<std::mutex> lock(mutex);
      samples.push_back(std::move(s));
    };
    std::vector<std::thread> threads;
    if (!arrivals.empty()) {  // Open loop: one thread per request, started on schedule.
      for (size_t i = 0; i < arrivals.size(); ++i) {
        const double wait = arrivals[i].at_s - elapsed();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        threads.emplace_back([&, i] {
          record(RunOne(o, prompts[i % prompts.size()].text, arrivals[i].max_tokens));
        });
      }
    } else {  // Closed loop: request i is conversation i (one turn unless --turns).
      auto prompt = [&](int i, int turn) -> const std::string& {
        return prompts[static_cast<size_t>(o.prompt_offset + i * o.turns + turn) % prompts.size()]
            .text;
      };
      for (int c = 0; c < o.clients; ++c)
        threads.emplace_back([&] {
          for (;;) {
            const int i = next++;
            if (o.duration_s > 0 ? elapsed() >= o.duration_s : i >= o.requests) return;
            std::vector<std::string> history;
            for (int turn = 0; turn < o.turns; ++turn) {
              Sample s = RunOne(o, prompt(i, turn), o.max_tokens, history);
              const bool ok = s.ok;
              history.push_back(prompt(i, turn));
              history.push_back(s.text);
              record(std::move(s));
              if (!ok) break;
            }
          }
        });
    }
    for (auto& t : threads) t.join();
    const double wall = elapsed();

    std::vector<double> ttft, tpot, latency;
    int64_t tokens = 0, prompt_tokens = 0, cached_tokens = 0;
    int errors = 0;
    std::string first_error;
    for (const Sample& s : samples) {
      if (!s.ok) {
        if (errors++ == 0) first_error = s.error;
        continue;
      }
      ttft.push_back(s.ttft_s * 1e3);
      if (s.tokens > 1) tpot.push_back(s.tpot_s * 1e3);
      latency.push_back(s.latency_s * 1e3);
      tokens += s.tokens;
      prompt_tokens += s.prompt_tokens;
      cached_tokens += s.cached_tokens;
    }
    auto stats = [](const std::vector<double>& v) {
      double sum = 0;
      for (double x : v) sum += x;
      return json{{"p50", Percentile(v, 50)},
                  {"p90", Percentile(v, 90)},
                  {"p99", Percentile(v, 99)},
                  {"mean", v.empty() ? 0.0 : sum / static_cast<double>(v.size())}};
    };
    json out = {
        {"mode", arrivals.empty() ? "closed" : "arrivals"},
        {"clients", arrivals.empty() ? o.clients : 0},
        {"arrivals", o.arrivals},
        {"time_scale", o.time_scale},
        {"offered_requests_per_s",
         arrivals.size() > 1 && arrivals.back().at_s > 0
             ? static_cast<double>(arrivals.size() - 1) / arrivals.back().at_s
             : 0.0},
        {"requests", samples.size()},
        {"errors", errors},
        {"wall_s", wall},
        {"output_tokens", tokens},
        {"prompt_tokens", prompt_tokens},
        {"cached_prompt_tokens", cached_tokens},
        {"turns", o.turns},
        {"output_tokens_per_s", wall > 0 ? static_cast<double>(tokens) / wall : 0.0},
        {"requests_per_s", wall > 0 ? static_cast<double>(samples.size() - errors) / wall : 0.0},
        {"ttft_ms", stats(ttft)},
        {"tpot_ms", stats(tpot)},
        {"latency_ms", stats(latency)}};
    if (errors) out["first_error"] = first_error;
    if (o.json) {
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("%zu requests (%d errors) in %.1f s: %.1f output tok/s, %.2f req/s\n",
                  samples.size(), errors, wall, out["output_tokens_per_s"].get<double>(),
                  out["requests_per_s"].get<double>());
      for (const char* k : {"ttft_ms", "tpot_ms", "latency_ms"})
        std::printf("%-10s p50 %8.1f  p90 %8.1f  p99 %8.1f\n", k, out[k]["p50"].get<double>(),
                    out[k]["p90"].get<double>(), out[k]["p99"].get<double>());
      if (errors) std::printf("first error: %s\n", first_error.c_str());
    }
    return errors ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve_load: %s\n", e.what());
    return 1;
  }
}

// `moex serve`: the engine behind an OpenAI-compatible HTTP API with continuous batching
// (docs/serving.md). SIGINT/SIGTERM drain the running and queued requests, then the server
// exits 0, saving --policy-state when asked.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "cli/session.h"
#include "core/budget.h"
#include "core/error.h"
#include "serve/loading_server.h"
#include "serve/server.h"
#include "tiers/host_tier.h"

namespace moex::cli {

namespace {

std::atomic<int> g_signal{0};

extern "C" void OnStopSignal(int signal) {
  g_signal = signal;
}

struct ServeOptions {
  ModelOptions model;
  serve::ServerOptions server;
  double drain_s = 60;
  std::string prefix_cache = "1GiB";
  std::string log_format = "text";
};

int RunServe(ServeOptions o) {
  Check(o.prefix_cache.empty() || o.prefix_cache.back() != '%',
        "--prefix-cache takes bytes (1GiB, 512MiB, 0 to turn it off), not a share: '",
        o.prefix_cache, "'");
  o.server.scheduler.prefix_cache_bytes = ParseBudget(o.prefix_cache, 0);
  o.server.access_log = serve::ParseAccessLogFormat(o.log_format);
  // A worker rank of --expert-parallel computes experts for rank 0 only: no port, no HTTP.
  if (IsExpertParallelWorker(o.model)) OpenSession(o.model);
  // The port answers from the start: /health says "loading" until the model is ready.
  auto loading = std::make_unique<serve::LoadingServer>(o.server.host);
  o.server.port = loading->Start(o.server.port);
  std::fprintf(stderr, "moex: loading the model; http://%s:%d/health answers 503 until ready\n",
               o.server.host.c_str(), o.server.port);
  o.model.kv_sequences = o.server.scheduler.max_running;  // For --host-budget auto.
  auto session = OpenSession(o.model);
  o.server.context = session->ContextTokens();
  if (o.server.model_name.empty()) {
    std::filesystem::path path(o.model.model.empty() ? DefaultModelPath() : o.model.model);
    if (path.filename().empty()) path = path.parent_path();
    o.server.model_name = path.filename().string();
  }
  if (o.server.model_name.empty()) o.server.model_name = "moex";
  serve::Server server(*session->transformer, session->tokenizer.get(), session->executor.get(),
                       o.server);
  loading.reset();  // Frees the port for the server, which binds it at once.
  const int port = server.Bind();
  std::signal(SIGPIPE, SIG_IGN);  // A client that hangs up is a failed write, not a death.
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  std::printf("moex: serving %s at http://%s:%d (OpenAI API under /v1; Ctrl-C stops)\n",
              o.server.model_name.c_str(), o.server.host.c_str(), port);
  std::fflush(stdout);

  std::atomic<bool> stopped{false};
  std::thread watcher([&] {
    while (g_signal == 0 && !stopped) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_signal != 0) {
      std::fprintf(stderr, "moex: signal %d: finishing the running requests\n", g_signal.load());
      server.Shutdown(o.drain_s);
    }
  });
  server.Run();
  stopped = true;
  watcher.join();
  session->SavePolicyState();
  // What the policy reports of the whole run (e.g. regroup's scored units), as one line.
  if (auto* offload = dynamic_cast<OffloadMoeExecutor*>(session->executor.get())) {
    nlohmann::json report = nlohmann::json::object();
    offload->tier().controller().policy().ReportJson(&report);
    if (!report.empty()) std::fprintf(stderr, "moex: policy report: %s\n", report.dump().c_str());
  }
  std::fprintf(stderr, "moex: server stopped\n");
  return 0;
}

}  // namespace

Runner AddServeCommand(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "serve the model over an OpenAI-compatible HTTP API");
  AddModelOptions(*cmd, o->model);
  serve::ServerOptions& s = o->server;
  s.model_name.clear();  // Default: the model's directory name.
  cmd->add_option("--host", s.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", s.port, "port to listen on (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option(
         "--api-key", s.api_key,
         "require 'Authorization: Bearer KEY' on every endpoint but /health and the page at /")
      // `--api-key "$KEY"` with KEY unset must not quietly serve without authentication.
      ->check([](const std::string& key) -> std::string {
        return key.empty() ? "an empty key would turn authentication off (is the variable that "
                             "holds it unset?); leave --api-key out to serve without one"
                           : "";
      });
  cmd->add_option("--model-name", s.model_name,
                  "model id reported by /v1/models (default: the model's directory name)");
  cmd->add_option("--max-running", s.scheduler.max_running,
                  "requests decoded together (each holds a KV cache)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-queue", s.scheduler.max_queue, "requests waiting for a slot; more get 429")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--max-batch-tokens", s.scheduler.max_batch_tokens,
                  "tokens in one forward pass (decodes plus prefill chunks)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--prefill-chunk", s.scheduler.prefill_chunk,
                  "prompt tokens of one request per pass, so long prompts do not stall decodes")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--tpot-target", s.scheduler.tpot_target_ms,
                  "ms per output token to keep running requests under: prefill chunks wait "
                  "while a pass with them would exceed it on average (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7));
  cmd->add_option("--prefix-cache", o->prefix_cache,
                  "KV bytes kept for prompts that start like earlier ones (multi-turn chats, "
                  "shared system prompts): their prefill is copied, not computed (0: off)")
      ->capture_default_str();
  cmd->add_option("--prefix-cache-block", s.scheduler.prefix_block_tokens,
                  "tokens per prefix-cache block (a prefix is reused in whole blocks)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--timeout", s.scheduler.timeout_s,
                  "seconds a request may take from arrival (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7));
  cmd->add_option("--regroup", s.scheduler.regroup,
                  "run passes in units of N (0/1: off; 2: ExpertFlow's two batches): each unit "
                  "splits the running requests into N equal passes, regrouped by the policy "
                  "so each pass activates fewer experts (docs/serving.md)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  cmd->add_option("--default-max-tokens", s.default_max_tokens,
                  "max_tokens of chat requests that give none")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--compact-json", s.compact_json,
                "write structured output and tool calls as compact JSON (no optional "
                "whitespace, one space after ':' and ','), so a model cannot spend its "
                "tokens on whitespace");
  cmd->add_option("--max-body", s.max_body_bytes, "largest request body, bytes")
      ->capture_default_str()
      ->check(CLI::Range(1024, 1 << 30));
  cmd->add_option("--log-format", o->log_format,
                  "one access-log line per request on stderr: text, json or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json", "off"}));
  cmd->add_option("--drain-timeout", o->drain_s,
                  "on SIGINT/SIGTERM, seconds to wait for responses to be written")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  return [o] { return RunServe(*o); };
}

}  // namespace moex::cli

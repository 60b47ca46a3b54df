// The OpenAI-compatible HTTP API over the scheduler (cpp-httplib): POST /v1/chat/completions
// and /v1/completions (streaming as server-sent events), GET /v1/models, /health and
// /metrics; and for people, the web page at / with the expert cache's view at
// GET /moex/cache. Every error is OpenAI's error JSON with its 4xx/5xx status.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "serve/access_log.h"
#include "serve/api_request.h"
#include "serve/expert_activity.h"
#include "serve/scheduler.h"
#include "serve/serve_metrics.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace moex::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (tests).
  std::string model_name = "moex";
  std::string api_key;  // Non-empty: every endpoint but /health and the page at / needs it.
  size_t max_body_bytes = 8u << 20;
  int default_max_tokens = 256;  // Chat requests without max_tokens.
  // Structured output and tool calls are compact JSON: no optional whitespace to wander in.
  bool compact_json = false;
  int64_t context = 0;           // Tokens a request may hold (prompt and reply); 0: the model's.
  AccessLogFormat access_log = AccessLogFormat::kOff;  // One line per request on stderr.
  SchedulerOptions scheduler;
};

class Server {
 public:
  // The transformer, tokenizer (may be null) and executor (may be null) outlive the server,
  // which observes the transformer's events while it lives.
  Server(Transformer& transformer, const Tokenizer* tokenizer, MoeExecutor* executor,
         ServerOptions options);
  ~Server();

  // Binds the listening socket; returns the port (the chosen one for port 0). Throws Error.
  int Bind();
  // Serves until Shutdown(); returns when the listener has stopped.
  void Run();
  // Refuses new requests (503), lets the running and queued ones finish and their responses
  // be written, then stops the listener, all within about `grace_s`: what has not finished
  // by then ends with 503 (a stream gets an error event), and a chat template still
  // rendering is cancelled. Thread-safe.
  void Shutdown(double grace_s = 10);

  Scheduler& scheduler() { return *scheduler_; }
  // The token ids a request's prompt becomes (chat template or plain text); ApiError 400
  // when it cannot be built, 504 when `deadline` passes while the template renders, 503
  // when the server shuts down meanwhile.
  std::vector<int32_t> PromptTokens(const ApiRequest& request,
                                    Clock::time_point deadline = Clock::time_point::max()) const;

 private:
  void Routes();
  void Complete(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  // The APIs served by translation onto a chat request (server_dialects.cc): Anthropic's
  // Messages and OpenAI's Responses.
  enum class Dialect { kMessages, kResponses };
  void CompleteDialect(Dialect dialect, const httplib::Request& req, httplib::Response& res);
  Job MakeJob(const ApiRequest& request, Clock::time_point deadline) const;
  // The format a reply is parsed in (kNone: plain text): the template's with tools, and
  // always for harmony, whose replies are channels; the tools its calls may name.
  ToolCallFormat ReplyFormat(const ApiRequest& request) const;
  nlohmann::ordered_json ReplyTools(const ApiRequest& request) const;
  // When a request arriving now times out (--timeout).
  Clock::time_point RequestDeadline() const;
  // What every generating endpoint checks once its body is parsed -- the model's name -- and
  // its job; sets the Warning header for ignored fields. Throws ApiError.
  Job AdmitJob(const ApiRequest& request, httplib::Response& res, Clock::time_point deadline) const;
  // A completion's prompt as text, for `echo` (token ids are decoded; none without a
  // tokenizer).
  std::string EchoText(const ApiRequest& request) const;

  Transformer& transformer_;
  const Tokenizer* tokenizer_;
  MoeExecutor* executor_;
  ServerOptions options_;
  ApiLimits limits_;
  std::optional<ChatTemplate> chat_template_;
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;  // The template's, for `tools`.
  bool template_renders_tools_ = false;  // Else the tool list goes into the system prompt.
  ServeMetrics metrics_;
  AccessLog access_log_;
  ExpertActivity activity_;  // The transformer's observer; read on the scheduler thread.
  Clock::time_point start_ = Clock::now();
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<int64_t> next_id_{0};
  std::atomic<int> open_streams_{0};
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> running_{false};  // Run() was called.
};

}  // namespace moex::serve

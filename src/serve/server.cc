#include "serve/server.h"

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <ctime>
#include <iterator>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/logging.h"
#include "serve/api_error.h"
#include "serve/cache_view.h"
#include "serve/logprobs_json.h"
#include "serve/tool_calls.h"
#include "serve/web_page.h"

namespace moex::serve {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// Messages may quote a client's invalid UTF-8: replace it rather than fail to answer.
std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void SendError(httplib::Response& res, int status, const std::string& message,
               const std::string& param = "", const std::string& code = "") {
  res.status = status;
  res.set_content(Dump(ApiError::ErrorBody(status, message, param, code)), "application/json");
}

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(Dump(e.Body()), "application/json");
}

std::string SseEvent(const json& j) {
  return "data: " + Dump(j) + "\n\n";
}

// The format used when a checkpoint has no chat template (the demo model): plain turns
// ending with an open assistant turn.
std::string PlainChatPrompt(const std::vector<ChatTurn>& messages) {
  std::string text;
  for (const ChatTurn& m : messages) {
    std::string role = m.role;
    if (!role.empty())
      role[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(role[0])));
    text += role + ": " + m.content + "\n\n";
  }
  return text + "Assistant:";
}

// Bodies up to this many times --max-body are read (and then refused with 413) so their
// clients see the answer; a longer declared length is refused before any of it is read.
constexpr uint64_t kMaxReadBodyFactor = 16;

}  // namespace

Server::Server(Transformer& transformer, const Tokenizer* tokenizer, MoeExecutor* executor,
               ServerOptions options)
    : transformer_(transformer),
      tokenizer_(tokenizer),
      executor_(executor),
      options_(std::move(options)),
      access_log_(options_.access_log, stderr),
      activity_(transformer.model().config.num_layers, transformer.model().config.num_experts),
      http_(std::make_unique<httplib::Server>()) {
  const ModelConfig& config = transformer_.model().config;
  limits_.context = options_.context > 0
                        ? std::min<int64_t>(options_.context, config.max_position_embeddings)
                        : config.max_position_embeddings;
  limits_.vocab_size = config.vocab_size;
  limits_.default_max_tokens = options_.default_max_tokens;
  limits_.compact_json = options_.compact_json;
  // All of a request's choices must fit the running slots and the queue at once.
  limits_.max_choices = std::clamp<int64_t>(
      options_.scheduler.max_running + options_.scheduler.max_queue, 1, limits_.max_choices);
  if (tokenizer_ && !tokenizer_->chat_template().empty()) {
    chat_template_.emplace(ChatTemplate::FromTokenizer(*tokenizer_));
    tool_format_ = DetectToolCallFormat(chat_template_->source());
    template_renders_tools_ = TemplateRendersTools(chat_template_->source());
  }
  activity_.set_pass_callback(
      [this](int64_t n, bool decode_only) { metrics_.ObserveActivatedExperts(n, decode_only); });
  transformer_.AddSink(&activity_);
  scheduler_ = std::make_unique<Scheduler>(transformer_, tokenizer_, options_.scheduler, &metrics_);
  if (executor_) scheduler_->set_regrouper(executor_->regrouper());
  if (executor_)
    scheduler_->set_snapshot_source([this] {
      json offload = executor_->MetricsJson();
      json cache = CacheViewJson(offload, activity_, executor_->ResidentShare());
      cache["time_s"] = std::chrono::duration<double>(Clock::now() - start_).count();
      return json{{"offload", std::move(offload)}, {"cache", std::move(cache)}};
    });
  // Every connection holds a thread while it streams: enough for every running and queued
  // request plus a few for /metrics and /health.
  const int threads = options_.scheduler.max_running + options_.scheduler.max_queue + 8;
  http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  // Not httplib's default SO_REUSEPORT, under which a second server on a busy port would
  // bind too and share its connections.
  http_->set_socket_options([](int sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  Routes();
}

Server::~Server() {
  Shutdown(0);
  scheduler_->Drain();  // The engine has stopped: nothing reports to the observer any more.
  transformer_.RemoveSink(&activity_);
}

int Server::Bind() {
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
    Check(port > 0, "cannot listen on ", options_.host, " (any port)");
  } else {
    Check(http_->bind_to_port(options_.host, port), "cannot listen on ", options_.host, ":", port,
          " (in use, or not an address of this machine)");
  }
  return port;
}

void Server::Run() {
  running_ = true;
  http_->listen_after_bind();
}

void Server::Shutdown(double grace_s) {
  if (shutting_down_.exchange(true)) return;
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(grace_s));
  scheduler_->Drain(grace_s);
  // The last chunks of finished streams are still being written: give them time, and a
  // moment past the deadline for the 503 events of requests the drain cut short.
  const auto written = std::max(until, Clock::now() + milliseconds(500));
  while (open_streams_ > 0 && Clock::now() < written) std::this_thread::sleep_for(milliseconds(10));
  // Run() on another thread may not be listening yet; stop() only stops a running listener.
  for (int i = 0; i < 500 && running_ && !http_->is_running(); ++i)
    std::this_thread::sleep_for(milliseconds(10));
  http_->stop();
}

std::vector<int32_t> Server::PromptTokens(const ApiRequest& r, Clock::time_point deadline) const {
  std::vector<int32_t> ids;
  if (r.endpoint == Endpoint::kCompletion && r.prompt_is_ids) return r.prompt_ids;
  if (r.tool_choice != "none" && tool_format_ == ToolCallFormat::kNone)
    throw ApiError(400,
                   chat_template_
                       ? "this model's chat template renders no tool calls in a format "
                         "moex parses (Hermes/Qwen, Mistral, DeepSeek V3/V3.1, GLM-4.5+, harmony): "
                         "'tools' cannot be used"
                       : "this model has no chat template: 'tools' cannot be used",
                   "tools");
  if (!tokenizer_)
    throw ApiError(400,
                   "the model ships no tokenizer: send /v1/completions with a prompt of token ids",
                   r.endpoint == Endpoint::kChat ? "messages" : "prompt");
  try {
    if (r.endpoint == Endpoint::kChat) {
      if (chat_template_) {
        // Tools go to the template as HF passes them; a call's arguments as an object, as
        // HF templates expect (`tool_call.arguments | tojson`), or as text where the format's
        // templates concatenate it (DeepSeek V3). A template that renders calls but not the
        // tool list gets it in the system prompt.
        json messages = json::array();
        const bool with_tools = r.tool_choice != "none";
        const bool merge_system = with_tools && !template_renders_tools_ && !r.messages.empty() &&
                                  r.messages[0].role == "system";
        if (with_tools && !template_renders_tools_) {
          const std::string tools_text = ToolInstructions(tool_format_, r.tools);
          if (merge_system)
            messages.push_back(
                {{"role", "system"}, {"content", tools_text + "\n\n" + r.messages[0].content}});
          else
            messages.push_back({{"role", "system"}, {"content", tools_text}});
        }
        for (const ChatTurn& m : r.messages) {
          if (&m == &r.messages[0] && merge_system) continue;  // Merged above.
          json message = {{"role", m.role}, {"content", m.content}};
          for (const ToolCall& c : m.tool_calls) {
            json arguments = json::parse(c.arguments, nullptr, false);
            if (arguments.is_discarded() || ArgumentsAsText(tool_format_)) arguments = c.arguments;
            message["tool_calls"].push_back(
                {{"id", c.id},
                 {"type", "function"},
                 {"function", {{"name", c.name}, {"arguments", std::move(arguments)}}}});
          }
          if (!m.tool_call_id.empty()) message["tool_call_id"] = m.tool_call_id;
          messages.push_back(std::move(message));
        }
        json extra = json::object();
        if (with_tools) extra["tools"] = json::parse(r.tools.dump());
        // The template writes any BOS itself. A checkpoint's template may loop for long (up
        // to its step budget): the request's timeout and shutdown cut it short.
        const auto cancelled = [&] { return shutting_down_ || Clock::now() >= deadline; };
        ids = tokenizer_->Encode(
            ApplyChatTemplateJson(*chat_template_, messages, true, extra, cancelled), false);
      } else {
        ids = tokenizer_->Encode(PlainChatPrompt(r.messages), tokenizer_->add_bos_default());
      }
    } else {
      ids = tokenizer_->Encode(r.prompt_text, tokenizer_->add_bos_default());
    }
  } catch (const Error& e) {
    if (shutting_down_) throw ApiError(503, "the server is shutting down", "", "", "server_error");
    if (Clock::now() >= deadline)
      throw ApiError(504, "the request timed out while its chat template was rendered", "",
                     "timeout", "server_error");
    // A template's raise_exception (e.g. roles that do not alternate) is the client's fault.
    throw ApiError(400, e.what(), r.endpoint == Endpoint::kChat ? "messages" : "prompt");
  }
  if (ids.empty())
    throw ApiError(400, "the prompt is empty",
                   r.endpoint == Endpoint::kChat ? "messages" : "prompt");
  return ids;
}

std::string Server::EchoText(const ApiRequest& r) const {
  if (!r.prompt_is_ids) return r.prompt_text;
  return tokenizer_ ? tokenizer_->Decode(r.prompt_ids) : "";
}

Clock::time_point Server::RequestDeadline() const {
  const double timeout_s = options_.scheduler.timeout_s;
  return timeout_s > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(timeout_s))
                       : Clock::time_point::max();
}

Job Server::AdmitJob(const ApiRequest& request, httplib::Response& res,
                     Clock::time_point deadline) const {
  // As llama-server and vLLM, fields moex does not know are ignored; the client is told
  // (on an error response too).
  if (!request.ignored_fields.empty()) res.set_header("Warning", IgnoredFieldsWarning(request));
  if (!request.model.empty() && request.model != options_.model_name)
    throw ApiError(404,
                   "The model '" + request.model + "' does not exist: this server serves '" +
                       options_.model_name +
                       "' (GET /v1/models; start it with --model-name to answer to another name)",
                   "model", "model_not_found");
  return MakeJob(request, deadline);
}

ToolCallFormat Server::ReplyFormat(const ApiRequest& r) const {
  if (r.endpoint != Endpoint::kChat || !chat_template_) return ToolCallFormat::kNone;
  return r.tool_choice != "none" || tool_format_ == ToolCallFormat::kHarmony
             ? tool_format_
             : ToolCallFormat::kNone;
}

nlohmann::ordered_json Server::ReplyTools(const ApiRequest& r) const {
  return r.tool_choice != "none" ? r.tools : nlohmann::ordered_json::array();
}

Job Server::MakeJob(const ApiRequest& r, Clock::time_point deadline) const {
  Job job;
  job.prompt = PromptTokens(r, deadline);
  job.special_text = ReplyFormat(r) == ToolCallFormat::kHarmony;
  job.max_tokens = r.max_tokens;
  const SamplingDefaults& defaults = transformer_.model().sampling;
  job.sampling.temperature = r.temperature.value_or(defaults.temperature);
  job.sampling.top_p = r.top_p.value_or(defaults.top_p);
  job.sampling.top_k = r.top_k.value_or(defaults.top_k);
  job.sampling.min_p = r.min_p.value_or(defaults.min_p);
  job.sampling.repetition_penalty = r.repetition_penalty.value_or(defaults.repetition_penalty);
  job.sampling.repeat_last_n = r.repeat_last_n.value_or(defaults.repeat_last_n);
  job.sampling.seed = r.seed ? *r.seed : std::random_device{}();
  job.sampling.presence_penalty = r.presence_penalty;
  job.sampling.frequency_penalty = r.frequency_penalty;
  job.sampling.logit_bias = r.logit_bias;
  job.logprobs = r.logprobs;
  if (!r.ignore_eos) {
    const ModelConfig& config = transformer_.model().config;
    job.stop_ids.assign(config.eos_token_ids.begin(), config.eos_token_ids.end());
    if (tokenizer_)
      for (int32_t id : tokenizer_->eos_ids()) job.stop_ids.push_back(id);
  }
  job.stop_texts = r.stop;
  if (r.tool_choice == "required" || r.tool_choice == "function") {
    try {
      job.grammar =
          ToolCallGrammar(tool_format_, r.tools, r.tool_choice_name, options_.compact_json);
    } catch (const Error& e) {
      // A function's parameters schema with a keyword the grammar does not support.
      throw ApiError(400, std::string("tools: ") + e.what(), "tools");
    }
  }
  if (r.grammar) {
    if (!tokenizer_)
      throw ApiError(400, "'" + r.grammar_source + "' needs a model with a tokenizer",
                     r.grammar_source);
    job.grammar = r.grammar;
  }
  return job;
}

void Server::Routes() {
  // Statuses httplib sets itself (404, 413, 400 for a broken request line, ...) get an
  // OpenAI error body too.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "HTTP error " + std::to_string(res.status);
    if (res.status == 404) message = "Unknown request URL: " + req.method + " " + req.path;
    if (res.status == 413) message = "the request body is too large";
    if (res.status == 405) message = "method not allowed for " + req.path;
    SendError(res, res.status, message);
  });
  http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const ApiError& e) {
          SendError(res, e);
        } catch (const std::exception& e) {
          SendError(res, 500, std::string("internal error: ") + e.what());
        } catch (...) {
          SendError(res, 500, "internal error");
        }
      });

  // A Content-Length that is not a number, or that no honest client would send, is refused
  // before httplib reads the body: it would read "-5" as 2^64 - 5 and wait out the read
  // timeout for bytes that never come. A merely oversized body is still read and refused
  // with 413 by httplib, so its client sees the answer rather than a reset.
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    // Health checks that pass are what orchestrators poll every second: not news.
    const bool quiet = req.path == "/health" && res.status == 200;
    access_log_.End(&req, req.remote_addr, req.method, req.path, quiet ? 0 : res.status);
  });
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    access_log_.Begin(&req);
    if (!req.has_header("Content-Length")) return httplib::Server::HandlerResponse::Unhandled;
    const std::string value = req.get_header_value("Content-Length");
    uint64_t length = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
    const bool number = !value.empty() && ec == std::errc() && end == value.data() + value.size();
    if (number && length <= kMaxReadBodyFactor * options_.max_body_bytes)
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("Connection", "close");
    if (number)
      SendError(res, 413,
                "Content-Length " + value + " is over the " +
                    std::to_string(options_.max_body_bytes) + "-byte body limit (--max-body)");
    else
      SendError(res, 400, "Content-Length '" + value + "' is not a byte count");
    return httplib::Server::HandlerResponse::Handled;
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.status = shutting_down_ ? 503 : 200;
    res.set_content(json{{"status", shutting_down_ ? "shutting down" : "ok"}}.dump(),
                    "application/json");
  });
  // The key is checked in the handlers, after httplib has read the body: refusing before
  // that (pre-routing) closes the socket on unread data, and the client sees a reset.
  auto guarded = [this](httplib::Server::Handler handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      // OpenAI's clients send the key as a bearer token, Anthropic's as x-api-key.
      if (!options_.api_key.empty() &&
          req.get_header_value("Authorization") != "Bearer " + options_.api_key &&
          req.get_header_value("x-api-key") != options_.api_key)
        return SendError(res, 401,
                         "Incorrect API key provided: pass it as 'Authorization: Bearer <key>' "
                         "(or 'x-api-key: <key>')",
                         "", "invalid_api_key");
      handler(req, res);
    };
  };
  auto model_json = [this] {
    return json{{"id", options_.model_name},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "moex"},
                {"max_model_len", limits_.context}};
  };
  http_->Get("/v1/models", guarded([model_json](const httplib::Request&, httplib::Response& res) {
               res.set_content(json{{"object", "list"}, {"data", {model_json()}}}.dump(),
                               "application/json");
             }));
  http_->Get("/v1/models/(.+)",
             guarded([this, model_json](const httplib::Request& req, httplib::Response& res) {
               if (req.matches[1] != options_.model_name)
                 return SendError(res, 404,
                                  "The model '" + std::string(req.matches[1]) + "' does not exist",
                                  "model", "model_not_found");
               res.set_content(model_json().dump(), "application/json");
             }));
  http_->Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
               const json snapshot = scheduler_->EngineSnapshot();
               res.set_content(metrics_.Render(scheduler_->queued(), scheduler_->running(),
                                               snapshot.is_object() && snapshot.contains("offload")
                                                   ? snapshot["offload"]
                                                   : json()),
                               "text/plain; version=0.0.4");
             }));
  http_->Get("/moex/cache", guarded([this](const httplib::Request&, httplib::Response& res) {
               const json snapshot = scheduler_->EngineSnapshot();
               json view = snapshot.is_object() && snapshot.contains("cache")
                               ? snapshot["cache"]
                               : json{{"offloaded", false}, {"layers", json::array()}};
               view["model"] = options_.model_name;
               view["queue"] = scheduler_->queued();
               view["running"] = scheduler_->running();
               res.set_header("Cache-Control", "no-cache");
               res.set_content(Dump(view), "application/json");
             }));
  // The page itself holds no data and costs nothing, so it needs no key (a browser cannot
  // send one to open it); everything it shows comes from the guarded endpoints, and it asks
  // for the key when they answer 401.
  http_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    const std::string_view page = WebPage();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });
  http_->Post("/v1/chat/completions",
              guarded([this](const httplib::Request& req, httplib::Response& res) {
                Complete(Endpoint::kChat, req, res);
              }));
  http_->Post("/v1/completions",
              guarded([this](const httplib::Request& req, httplib::Response& res) {
                Complete(Endpoint::kCompletion, req, res);
              }));
  http_->Post("/v1/messages", guarded([this](const httplib::Request& req, httplib::Response& res) {
                CompleteDialect(Dialect::kMessages, req, res);
              }));
  http_->Post("/v1/responses", guarded([this](const httplib::Request& req, httplib::Response& res) {
                CompleteDialect(Dialect::kResponses, req, res);
              }));
}

void Server::Complete(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  const bool chat = endpoint == Endpoint::kChat;
  const std::string endpoint_name = chat ? "chat" : "completions";
  const std::shared_ptr<AccessRecord> record = access_log_.Record(&req);
  std::vector<std::shared_ptr<JobHandle>> handles;
  ApiRequest request;
  try {
    const ServeMetrics::Preparing preparing(metrics_);
    const Clock::time_point deadline = RequestDeadline();
    request = ParseApiRequest(endpoint, req.body, limits_);
    handles = scheduler_->SubmitChoices(AdmitJob(request, res, deadline), request.n);
  } catch (const ApiError& e) {
    metrics_.CountRequest(endpoint_name, e.status());
    return SendError(res, e);
  }
  const std::string id =
      (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++) + "-" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string object = chat ? "chat.completion" : "text_completion";
  // What the access log line says of a request: tokens and the first choice's TTFT.
  auto log_usage = [record, handles] {
    if (!record) return;
    record->prompt_tokens = handles.front()->prompt_tokens();
    record->completion_tokens = 0;
    for (const auto& h : handles) record->completion_tokens += h->completion_tokens();
    record->ttft_ms = handles.front()->ttft_ms();
  };
  // The prompt is counted once (its choices share it), completions over every choice.
  auto usage = [handles] {
    int64_t completion = 0;
    for (const auto& h : handles) completion += h->completion_tokens();
    const auto& first = handles.front();
    return json{{"prompt_tokens", first->prompt_tokens()},
                {"completion_tokens", completion},
                {"total_tokens", first->prompt_tokens() + completion},
                {"prompt_tokens_details", {{"cached_tokens", first->cached_tokens()}}}};
  };
  // Logprobs of a choice's tokens (null when not asked for); completions' text offsets run
  // on across the chunks of a stream, so each choice keeps its own builder.
  const bool with_logprobs = request.logprobs >= 0;
  std::vector<std::shared_ptr<LogprobsJson>> logprobs;
  for (size_t i = 0; i < handles.size(); ++i)
    logprobs.push_back(std::make_shared<LogprobsJson>(tokenizer_, chat));
  // Completions' echo: the prompt's text before the reply.
  const std::string echo = request.echo ? EchoText(request) : "";
  auto choice = [chat, with_logprobs, logprobs](size_t index, const std::string& text,
                                                const std::vector<int32_t>& tokens,
                                                const json& finish, bool delta,
                                                const std::vector<TokenLogprobs>& entries = {}) {
    json c = {
        {"index", index},
        {"logprobs", with_logprobs && (!delta || !entries.empty()) ? logprobs[index]->Next(entries)
                                                                   : json(nullptr)},
        {"finish_reason", finish}};
    if (chat) {
      c[delta ? "delta" : "message"] =
          delta ? (text.empty() ? json::object() : json{{"content", text}})
                : json{{"role", "assistant"}, {"content", text}};
    } else {
      c["text"] = text;
    }
    c["token_ids"] = tokens;  // Extension: the generated token ids.
    return c;
  };
  auto cancel_all = [handles] {
    for (const auto& h : handles) h->Cancel();
  };
  // With tools, a reply is split into content and calls (serve/tool_calls.h).
  const ToolCallFormat tools = ReplyFormat(request);
  const nlohmann::ordered_json offered = ReplyTools(request);
  auto calls_json = [tools](const std::vector<ToolCall>& calls, bool delta) {
    json out = json::array();
    for (size_t k = 0; k < calls.size(); ++k) {
      json c = {{"id", NewToolCallId(tools)},
                {"type", "function"},
                {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
      if (delta) c["index"] = k;
      out.push_back(std::move(c));
    }
    return out;
  };

  if (!request.stream) {
    json choices = json::array();
    for (size_t i = 0; i < handles.size(); ++i) {
      std::string text = echo;
      std::vector<int32_t> tokens;
      std::vector<TokenLogprobs> entries;
      JobHandle::Update u;
      do {
        u = handles[i]->Wait(milliseconds(1000));
        text += u.text;
        tokens.insert(tokens.end(), u.tokens.begin(), u.tokens.end());
        std::move(u.logprobs.begin(), u.logprobs.end(), std::back_inserter(entries));
      } while (!u.finished);
      if (const int status = FailedStatus(u.finish_reason); status != 0) {
        cancel_all();
        log_usage();
        metrics_.CountRequest(endpoint_name, status);
        return SendError(res, status, u.error);
      }
      if (tools == ToolCallFormat::kNone) {
        choices.push_back(choice(i, text, tokens, u.finish_reason, false, entries));
        continue;
      }
      const ParsedReply reply = ParseToolCalls(tools, text, offered);
      json c =
          choice(i, reply.content, tokens,
                 reply.calls.empty() ? json(u.finish_reason) : json("tool_calls"), false, entries);
      if (!reply.calls.empty()) {
        c["message"]["tool_calls"] = calls_json(reply.calls, false);
        if (reply.content.empty()) c["message"]["content"] = nullptr;
      }
      choices.push_back(std::move(c));
    }
    metrics_.CountRequest(endpoint_name, 200);
    log_usage();
    json body = {{"id", id},
                 {"object", object},
                 {"created", created},
                 {"model", options_.model_name},
                 {"choices", std::move(choices)},
                 {"usage", usage()}};
    res.set_content(Dump(body), "application/json");
    return;
  }

  metrics_.CountRequest(endpoint_name, 200);
  const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
  const bool include_usage = request.include_usage;
  auto chunk = [=, this](json choices) {
    json c = {{"id", id},
              {"object", chunk_object},
              {"created", created},
              {"model", options_.model_name},
              {"choices", std::move(choices)}};
    if (include_usage) c["usage"] = nullptr;
    return c;
  };
  ++open_streams_;
  auto started = std::make_shared<bool>(false);
  // Choices still running; each chunk carries one choice's news, as OpenAI streams n > 1.
  auto running = std::make_shared<std::vector<bool>>(handles.size(), true);
  auto splitters =
      std::make_shared<std::vector<ToolCallStream>>(handles.size(), ToolCallStream(tools, offered));
  auto failed = std::make_shared<bool>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          if (sink.write(s.data(), s.size())) return true;
          cancel_all();  // The client is gone.
          log_usage();
          return false;
        };
        if (!*started) {
          *started = true;
          for (size_t i = 0; i < handles.size(); ++i) {
            if (chat) {
              json first = choice(i, "", {}, nullptr, true);
              first["delta"] = {{"role", "assistant"}, {"content", ""}};
              if (!write(SseEvent(chunk({first})))) return false;
            } else if (!echo.empty()) {
              if (!write(SseEvent(chunk({choice(i, echo, {}, nullptr, true)})))) return false;
            }
          }
        }
        const auto wait = milliseconds(handles.size() == 1 ? 200 : 20);
        for (size_t i = 0; i < handles.size() && !*failed; ++i) {
          if (!(*running)[i]) continue;
          const JobHandle::Update u = handles[i]->Wait(wait);
          if (!u.text.empty() || !u.tokens.empty()) {
            const std::string content = (*splitters)[i].Push(u.text);
            if (!write(SseEvent(chunk({choice(i, content, u.tokens, nullptr, true, u.logprobs)}))))
              return false;
          }
          if (!u.finished) continue;
          (*running)[i] = false;
          if (const int status = FailedStatus(u.finish_reason); status != 0) {
            *failed = true;
            cancel_all();
            if (!write(SseEvent(ApiError::ErrorBody(status, u.error)))) return false;
            continue;
          }
          json finish = u.finish_reason;
          if (tools != ToolCallFormat::kNone) {
            // The held-back text: content, then the calls as whole deltas.
            const ParsedReply rest = (*splitters)[i].Finish();
            json delta = choice(i, rest.content, {}, nullptr, true);
            if (!rest.calls.empty()) {
              delta["delta"]["tool_calls"] = calls_json(rest.calls, true);
              finish = "tool_calls";
            }
            if ((!rest.content.empty() || !rest.calls.empty()) && !write(SseEvent(chunk({delta}))))
              return false;
          }
          if (!write(SseEvent(chunk({choice(i, "", {}, finish, true)})))) return false;
        }
        if (!*failed && std::count(running->begin(), running->end(), true) > 0) return true;
        if (!*failed && include_usage) {
          json last = chunk(json::array());
          last["usage"] = usage();
          if (!write(SseEvent(last))) return false;
        }
        if (!write("data: [DONE]\n\n")) return false;
        log_usage();  // httplib logs the request once the provider is done.
        sink.done();
        return true;
      },
      [cancel_all, this](bool) {
        cancel_all();  // No effect once finished; frees the slots when the client left.
        --open_streams_;
      });
}

}  // namespace moex::serve

// POST /v1/messages (Anthropic) and POST /v1/responses (OpenAI's Responses API): each request
// is translated into a chat request (serve/messages_api.h, serve/responses_api.h), runs on
// the same scheduler as /v1/chat/completions, and its one reply is rendered in the dialect's
// shape, whole or as its stream of events.
#include <httplib.h>

#include <chrono>
#include <ctime>

#include "serve/api_error.h"
#include "serve/dialect_json.h"
#include "serve/messages_api.h"
#include "serve/responses_api.h"
#include "serve/server.h"

namespace moex::serve {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// Either dialect's stream renderer behind one face.
struct DialectStream {
  std::unique_ptr<MessagesStream> messages;
  std::unique_ptr<ResponsesStream> responses;
  std::string Start(int64_t input_tokens) {
    return messages ? messages->Start(input_tokens) : responses->Start();
  }
  std::string Text(const std::string& text) {
    return messages ? messages->Text(text) : responses->Text(text);
  }
  std::string Finish(const ParsedReply& rest, const std::string& finish, const DialectUsage& u) {
    return messages ? messages->Finish(rest, finish, u) : responses->Finish(rest, finish, u);
  }
  std::string Error(int status, const std::string& message) {
    return messages ? MessagesStream::Error(status, message) : responses->Error(status, message);
  }
};

}  // namespace

void Server::CompleteDialect(Dialect dialect, const httplib::Request& req, httplib::Response& res) {
  const bool messages = dialect == Dialect::kMessages;
  const std::string endpoint_name = messages ? "messages" : "responses";
  auto send_error = [&](int status, const std::string& message, const std::string& param) {
    res.status = status;
    const json body =
        messages ? MessagesErrorBody(status, message) : ApiError::ErrorBody(status, message, param);
    res.set_content(DialectDump(body), "application/json");
  };
  const std::shared_ptr<AccessRecord> record = access_log_.Record(&req);
  std::shared_ptr<JobHandle> handle;
  ApiRequest request;
  DialectRequest dialect_request;
  try {
    const ServeMetrics::Preparing preparing(metrics_);
    const Clock::time_point deadline = RequestDeadline();
    dialect_request =
        messages ? TranslateMessagesRequest(req.body) : TranslateResponsesRequest(req.body);
    request = ParseApiRequest(Endpoint::kChat, dialect_request.chat_body, limits_);
    request.ignored_fields.insert(request.ignored_fields.end(), dialect_request.ignored.begin(),
                                  dialect_request.ignored.end());
    handle = scheduler_->SubmitChoices(AdmitJob(request, res, deadline), 1).front();
  } catch (const ApiError& e) {
    metrics_.CountRequest(endpoint_name, e.status());
    return send_error(e.status(), e.what(), e.param());
  }
  const std::string id = (messages ? "msg_" : "resp_") + std::to_string(next_id_++) + "_" +
                         std::to_string(Clock::now().time_since_epoch().count() % 1000000000);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string model = options_.model_name;
  const ToolCallFormat tools = ReplyFormat(request);
  const nlohmann::ordered_json offered = ReplyTools(request);
  auto usage = [handle] {
    DialectUsage u;
    u.input_tokens = handle->prompt_tokens();
    u.output_tokens = handle->completion_tokens();
    u.cached_tokens = handle->cached_tokens();
    return u;
  };
  auto log_usage = [record, handle] {
    if (!record) return;
    record->prompt_tokens = handle->prompt_tokens();
    record->completion_tokens = handle->completion_tokens();
    record->ttft_ms = handle->ttft_ms();
  };
  const json base = messages ? json() : ResponsesBase(id, created, model, dialect_request);

  if (!request.stream) {
    std::string text;
    JobHandle::Update u;
    do {
      u = handle->Wait(milliseconds(1000));
      text += u.text;
    } while (!u.finished);
    log_usage();
    if (const int status = FailedStatus(u.finish_reason); status != 0) {
      metrics_.CountRequest(endpoint_name, status);
      return send_error(status, u.error, "");
    }
    metrics_.CountRequest(endpoint_name, 200);
    ParsedReply reply;
    if (tools == ToolCallFormat::kNone)
      reply.content = text;
    else
      reply = ParseToolCalls(tools, text, offered);
    const json body = messages ? MessagesResponse(id, model, reply, u.finish_reason, usage(), tools)
                               : ResponsesResponse(base, reply, u.finish_reason, usage(), tools);
    res.set_content(DialectDump(body), "application/json");
    return;
  }

  metrics_.CountRequest(endpoint_name, 200);
  auto stream = std::make_shared<DialectStream>();
  if (messages)
    stream->messages = std::make_unique<MessagesStream>(id, model, tools);
  else
    stream->responses = std::make_unique<ResponsesStream>(base, tools);
  auto splitter = std::make_shared<ToolCallStream>(tools, offered);
  auto started = std::make_shared<bool>(false);
  ++open_streams_;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          if (s.empty() || sink.write(s.data(), s.size())) return true;
          handle->Cancel();  // The client is gone.
          log_usage();
          return false;
        };
        if (!*started) {
          *started = true;
          if (!write(stream->Start(handle->prompt_tokens()))) return false;
        }
        const JobHandle::Update u = handle->Wait(milliseconds(200));
        if (!u.text.empty() && !write(stream->Text(splitter->Push(u.text)))) return false;
        if (!u.finished) return true;
        log_usage();
        if (const int status = FailedStatus(u.finish_reason); status != 0) {
          if (!write(stream->Error(status, u.error))) return false;
        } else if (!write(stream->Finish(splitter->Finish(), u.finish_reason, usage()))) {
          return false;
        }
        sink.done();
        return true;
      },
      [handle, this](bool) {
        handle->Cancel();  // No effect once finished; frees the slot when the client left.
        --open_streams_;
      });
}

}  // namespace moex::serve

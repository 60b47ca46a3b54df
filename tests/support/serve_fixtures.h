// `moex serve` for tests, in process (a Server on an open session, any free port) or as a
// child process (the real binary: signals, exit codes, resident memory).
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/session.h"
#include "serve/http_client.h"
#include "serve/server.h"

namespace moex::testing {

// A Server on loopback, any free port, running on its own thread until destroyed.
struct RunningServer {
  RunningServer(cli::ModelOptions model, serve::ServerOptions options);
  // On a session the test built (a policy of its own, say).
  RunningServer(std::unique_ptr<cli::Session> session, serve::ServerOptions options);
  ~RunningServer();
  serve::HttpResult Post(const std::string& path, const nlohmann::json& body,
                         const serve::EventHandler& on_event = {}) const;
  serve::HttpResult PostRaw(const std::string& path, const std::string& body) const;
  serve::HttpResult Get(const std::string& path,
                        const std::vector<std::string>& headers = {}) const;
  int Context() const;  // The model's context (max_model_len).

  std::unique_ptr<cli::Session> session;
  std::unique_ptr<serve::Server> server;
  std::thread thread;
  int port = 0;
};

// A copy of the tiny OLMoE in `dir` (a 2,048-token context) with a byte-level tokenizer and a
// chat template that renders tools and calls as Qwen's does (<tool_call> blocks), for
// tool-calling tests; or with `chat_template` instead.
cli::ModelOptions ToolTemplateModel(const std::filesystem::path& dir,
                                    const std::string& chat_template = "");

// The same tiny model with gpt-oss's harmony format: a template of harmony messages that renders
// the tools and calls, and <|start|>, <|end|>, <|message|>, <|channel|>, <|constrain|>,
// <|return|>, <|call|> as special tokens (ids 300-306; <|return|> and <|call|> end a reply).
cli::ModelOptions HarmonyModel(const std::filesystem::path& dir);

// Small scheduler batches (8 running, 12 tokens a pass, prefill chunks of 4), so prompts
// share passes.
serve::ServerOptions SmallBatchOptions();

// A `moex serve ARGS...` child process whose stdout is read line by line; killed (SIGKILL)
// if still running when destroyed.
class ServeProcess {
 public:
  explicit ServeProcess(std::vector<std::string> args);
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // The port from the "serving ... at http://host:port" line; 0 if it never came.
  int ReadPort();
  void Signal(int sig);
  // Exit status, or 128 + the signal that ended it.
  int Wait();
  pid_t pid() const { return pid_; }
  // Its resident set (VmRSS) in bytes; 0 once it has gone.
  int64_t ResidentBytes() const;

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  bool waited_ = false;
};

}  // namespace moex::testing

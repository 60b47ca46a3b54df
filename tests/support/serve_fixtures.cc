#include "support/serve_fixtures.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/random_model.h"
#include "support/run_command.h"
#include "support/tiny_models.h"
#include "text/byte_tokenizer_json.h"

namespace moex::testing {

RunningServer::RunningServer(cli::ModelOptions model, serve::ServerOptions options)
    : RunningServer(cli::OpenSession(model), std::move(options)) {}

RunningServer::RunningServer(std::unique_ptr<cli::Session> s, serve::ServerOptions options)
    : session(std::move(s)) {
  options.port = 0;
  server = std::make_unique<serve::Server>(*session->transformer, session->tokenizer.get(),
                                           session->executor.get(), options);
  port = server->Bind();
  thread = std::thread([this] { server->Run(); });
}

RunningServer::~RunningServer() {
  server->Shutdown(5);
  thread.join();
}

serve::HttpResult RunningServer::Post(const std::string& path, const nlohmann::json& body,
                                      const serve::EventHandler& on_event) const {
  return serve::HttpRequest("127.0.0.1", port, "POST", path, body.dump(), {}, on_event);
}

serve::HttpResult RunningServer::PostRaw(const std::string& path, const std::string& body) const {
  return serve::HttpRequest("127.0.0.1", port, "POST", path, body);
}

serve::HttpResult RunningServer::Get(const std::string& path,
                                     const std::vector<std::string>& headers) const {
  return serve::HttpRequest("127.0.0.1", port, "GET", path, "", headers);
}

int RunningServer::Context() const {
  return nlohmann::json::parse(Get("/v1/models").body)["data"][0]["max_model_len"];
}

ServeProcess::ServeProcess(std::vector<std::string> args) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> argv;
    args.insert(args.begin(), {MoexBinary(), "serve"});
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  out_ = ::fdopen(fds[0], "r");
}

ServeProcess::~ServeProcess() {
  if (pid_ > 0 && !waited_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_) std::fclose(out_);
}

int ServeProcess::ReadPort() {
  char line[1024];
  while (std::fgets(line, sizeof line, out_)) {
    std::smatch m;
    const std::string s(line);
    if (std::regex_search(s, m, std::regex(R"(at http://[^:]+:(\d+))"))) return std::stoi(m[1]);
  }
  return 0;
}

void ServeProcess::Signal(int sig) {
  ::kill(pid_, sig);
}

int ServeProcess::Wait() {
  int status = 0;
  ::waitpid(pid_, &status, 0);
  waited_ = true;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int64_t ServeProcess::ResidentBytes() const {
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      in >> kib;
      return kib * 1024;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

namespace {

constexpr const char* kToolTemplate =
    "{% if tools %}<|im_start|>system\n<tools>\n{% for t in tools %}{{ t | tojson }}\n"
    "{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    "{{ c.function | tojson }}\n</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

}  // namespace

cli::ModelOptions ToolTemplateModel(const std::filesystem::path& dir,
                                    const std::string& chat_template) {
  const std::filesystem::path model = dir / "tools";
  std::filesystem::copy(TinyModelPath(Arch::kOlmoe), model);
  // A byte per token: room for a tool list and a call in DeepSeek's multi-byte markers.
  nlohmann::json config = nlohmann::json::parse(std::ifstream(model / "config.json"));
  config["max_position_embeddings"] = 2048;
  std::ofstream(model / "config.json") << config.dump();
  const ModelConfig shape = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  ByteTokenizerFiles files = ByteLevelTokenizerFor(static_cast<int>(shape.vocab_size),
                                                   shape.bos_token_id, shape.eos_token_ids);
  files.config["chat_template"] = chat_template.empty() ? kToolTemplate : chat_template;
  std::ofstream(model / "tokenizer.json") << files.tokenizer.dump();
  std::ofstream(model / "tokenizer_config.json") << files.config.dump();
  cli::ModelOptions options;
  options.model = model.string();
  return options;
}

cli::ModelOptions HarmonyModel(const std::filesystem::path& dir) {
  const std::string chat_template =
      "{% if tools %}<|start|>developer<|message|># Tools\nnamespace functions {\n"
      "{% for t in tools %}type {{ t.function.name }} = (_: {{ t.function.parameters | tojson }})"
      " => any;\n{% endfor %}}<|end|>{% endif %}{% for m in messages %}{% if m.tool_calls %}"
      "{% for c in m.tool_calls %}<|start|>assistant<|channel|>commentary to=functions."
      "{{ c.function.name }} <|constrain|>json<|message|>{{ c.function.arguments | tojson }}"
      "<|call|>{% endfor %}{% elif m.role == 'tool' %}<|start|>functions.reply to=assistant"
      "<|channel|>commentary<|message|>{{ m.content }}<|end|>{% else %}<|start|>{{ m.role }}"
      "<|message|>{{ m.content }}<|end|>{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}<|start|>assistant{% endif %}";
  cli::ModelOptions options = ToolTemplateModel(dir, chat_template);
  const std::filesystem::path model = options.model;
  nlohmann::json tokenizer = nlohmann::json::parse(std::ifstream(model / "tokenizer.json"));
  int id = 300;
  for (const char* name : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                           "<|return|>", "<|call|>"}) {
    auto& vocab = tokenizer["model"]["vocab"];
    vocab.erase("<|reserved_" + std::to_string(id) + "|>");
    vocab[name] = id;
    tokenizer["added_tokens"].push_back({{"id", id},
                                         {"content", name},
                                         {"single_word", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"normalized", false},
                                         {"special", true}});
    ++id;
  }
  std::ofstream(model / "tokenizer.json") << tokenizer.dump();
  nlohmann::json config = nlohmann::json::parse(std::ifstream(model / "config.json"));
  config["eos_token_id"] = {2, 305, 306};
  std::ofstream(model / "config.json") << config.dump();
  return options;
}

serve::ServerOptions SmallBatchOptions() {
  serve::ServerOptions o;
  o.scheduler.max_running = 8;
  o.scheduler.max_batch_tokens = 12;
  o.scheduler.prefill_chunk = 4;
  return o;
}

}  // namespace moex::testing

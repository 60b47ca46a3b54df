// `moex chat`: an interactive conversation in the terminal. Each line read is a user turn;
// the whole history goes through the checkpoint's chat template and the reply streams as it
// is generated, followed by a line of what it cost. At a terminal lines are edited and kept
// in a history (cli/line_reader.h); Ctrl-C stops a reply and keeps the conversation. /help
// lists the commands: /reset, /save FILE, /exit (or end of input).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/line_reader.h"
#include "cli/session.h"
#include "core/error.h"
#include "engine/generator.h"
#include "text/chat_template.h"
#include "text/tokenizer_stream.h"

namespace moex::cli {

namespace {

struct ChatOptions {
  ModelOptions model;
  std::string system;
  int max_tokens = 256;
  SamplingOptions sampling;
  bool history = true;  // Keep the typed lines between sessions (terminal only).
};

// The conversation rendered and encoded; the oldest turns are dropped until the prompt
// and the reply fit the model's context. On an error (the last message alone does not fit)
// the history is left as it was.
std::vector<int32_t> EncodeHistory(const Tokenizer& tok, const ChatTemplate& chat,
                                   std::vector<ChatMessage>& history, int64_t room) {
  std::vector<ChatMessage> kept = history;
  const size_t first_turn = !kept.empty() && kept.front().role == "system" ? 1 : 0;
  for (;;) {
    std::vector<int32_t> ids = tok.Encode(ApplyChatTemplate(chat, kept, true), false);
    if (static_cast<int64_t>(ids.size()) <= room) {
      history = std::move(kept);
      return ids;
    }
    Check(kept.size() > first_turn + 1, "the message is too long for the model's context (",
          ids.size(), " tokens with the template, room for ", room, ")");
    // Drop the oldest user turn and the reply to it.
    kept.erase(kept.begin() + static_cast<ptrdiff_t>(first_turn),
               kept.begin() + static_cast<ptrdiff_t>(std::min(first_turn + 2, kept.size() - 1)));
  }
}

// Set by Ctrl-C while a reply streams: the reply stops, the conversation stays. At the
// prompt Ctrl-C keeps its default meaning (the program ends, the terminal restored).
std::atomic<bool> g_stop_reply{false};
extern "C" void OnReplyInterrupt(int) {
  g_stop_reply = true;
}

// SIGINT stops the reply while this lives (no SA_RESTART: nothing waits on a read then).
class ReplyInterrupt {
 public:
  ReplyInterrupt() {
    g_stop_reply = false;
    struct sigaction action = {};
    action.sa_handler = OnReplyInterrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_);
  }
  ~ReplyInterrupt() { sigaction(SIGINT, &previous_, nullptr); }
  ReplyInterrupt(const ReplyInterrupt&) = delete;
  ReplyInterrupt& operator=(const ReplyInterrupt&) = delete;

 private:
  struct sigaction previous_ = {};
};

constexpr const char* kHelp =
    "  /help         this list\n"
    "  /reset        forget the conversation (the system message stays)\n"
    "  /save FILE    write the conversation as JSON ({\"messages\": [...]}) to a new FILE\n"
    "  /exit, /quit  end (so does Ctrl-D); Ctrl-C stops a reply and keeps the conversation\n";

// /save: the messages as OpenAI's API takes them, into a file that does not exist yet (a
// conversation never replaces a file), written whole or not at all.
void SaveConversation(const std::vector<ChatMessage>& history, const std::string& path) {
  namespace fs = std::filesystem;
  Check(!path.empty(), "/save needs a file name: /save chat.json");
  std::error_code ec;
  Check(!fs::exists(path, ec), path, " already exists: /save writes only new files");
  nlohmann::json messages = nlohmann::json::array();
  for (const ChatMessage& m : history) messages.push_back({{"role", m.role}, {"content", m.content}});
  const std::string temp = path + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream out(temp, std::ios::binary);
    out << nlohmann::json{{"messages", messages}}.dump(2) << "\n";
    out.close();
    if (!out) {
      fs::remove(temp, ec);
      Fail("cannot write ", path, " (", std::strerror(errno), ")");
    }
  }
  // link() refuses an existing target: a file that appeared meanwhile is not replaced.
  const int linked = ::link(temp.c_str(), path.c_str());
  const int saved_errno = errno;
  fs::remove(temp, ec);
  Check(linked == 0, "cannot write ", path, " (", std::strerror(saved_errno), ")");
}

int RunChat(const ChatOptions& o) {
  auto session = OpenSession(o.model);
  const Tokenizer& tok = session->RequireTokenizer();
  const ChatTemplate chat = ChatTemplate::FromTokenizer(tok);
  const int64_t context = session->ContextTokens();
  const SamplingParams sampling = ResolveSampling(o.sampling, session->model->sampling);
  Check(o.max_tokens < context, "--max-tokens (", o.max_tokens,
        ") must leave room for the prompt in the model's context of ", context, " tokens");
  LineReader reader(o.history ? DefaultChatHistoryPath() : "");
  const bool interactive = reader.interactive();
  if (interactive)
    std::cerr << "moex chat: " << session->model->path << "\nsampling: "
              << session->model->sampling.Describe()
              << "; /help lists the commands, Ctrl-C stops a reply, Ctrl-D ends\n";

  std::vector<ChatMessage> history;
  if (!o.system.empty()) history.push_back({"system", o.system});
  Generator generator(*session->transformer);
  generator.set_stop_check([] { return g_stop_reply.load(); });
  uint64_t turn = 0;
  for (;;) {
    const std::optional<std::string> read = reader.Read("> ");
    if (!read) break;
    const std::string& line = *read;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/help") {
      std::cerr << kHelp;
      continue;
    }
    if (line == "/reset") {
      history.resize(o.system.empty() ? 0 : 1);
      std::cerr << "moex chat: conversation forgotten\n";
      continue;
    }
    if (line == "/save" || line.starts_with("/save ")) {
      const std::string path = line.size() > 6 ? line.substr(6) : "";
      try {
        SaveConversation(history, path);
        std::cerr << "moex chat: saved " << history.size() << " messages to " << path << "\n";
      } catch (const Error& e) {
        std::cerr << "moex chat: " << e.what() << "\n";
      }
      continue;
    }
    if (line.size() > 1 && line[0] == '/' && std::isalpha(static_cast<unsigned char>(line[1]))) {
      std::cerr << "moex chat: unknown command " << line.substr(0, line.find(' '))
                << " (/help lists them)\n";
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line});
    GenerationRequest request;
    try {
      request.prompt = EncodeHistory(tok, chat, history, context - o.max_tokens);
    } catch (const Error& e) {
      // One bad turn (too long for the context, say) does not end the conversation.
      std::cerr << "moex chat: " << e.what() << "\n";
      history.pop_back();
      continue;
    }
    request.max_tokens = o.max_tokens;
    request.sampling = sampling;
    request.sampling.seed = sampling.seed + turn++;
    request.stop_ids = session->StopIds();
    StreamDecoder stream(tok, true);
    std::vector<GenerationResult> results;
    {
      const ReplyInterrupt interrupt;
      results = generator.Generate(
          {request}, [&](size_t, int32_t token) { std::cout << stream.Push(token) << std::flush; });
    }
    std::cout << stream.Flush() << "\n" << std::flush;
    std::vector<int32_t> reply = results[0].tokens;
    if (results[0].finish_reason == "stop" && !reply.empty()) reply.pop_back();
    history.push_back({"assistant", tok.Decode(reply, true)});
    // llama-cli's habit: what the reply cost.
    const GenerationTimings& t = generator.timings();
    std::fprintf(stderr, "[%s%zu tokens, %.1f tok/s; prompt %lld tokens in %.0f ms]\n",
                 results[0].finish_reason == "cancelled" ? "stopped; " : "", results[0].tokens.size(),
                 t.decode_ms > 0 ? 1000.0 * static_cast<double>(t.decode_steps) / t.decode_ms : 0.0,
                 static_cast<long long>(t.prompt_tokens), t.prefill_ms);
  }
  session->SavePolicyState();
  return 0;
}

}  // namespace

Runner AddChatCommand(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "talk with the model in the terminal (one line per turn; /exit ends)");
  AddModelOptions(*cmd, o->model);
  cmd->add_option("--system", o->system, "system message opening the conversation");
  cmd->add_option("-n,--max-tokens,--n-predict", o->max_tokens, "most tokens per reply")
      ->check(CLI::Range(1, 1 << 20));
  AddSamplingOptions(*cmd, o->sampling, "random seed; turn n uses seed + n (default: random)");
  cmd->add_flag("!--no-history", o->history,
                "do not read or save the typed lines' history (" + DefaultChatHistoryPath() + ")");
  return [o] { return RunChat(*o); };
}

}  // namespace moex::cli

// `moex chat`: an interactive conversation in the terminal. Each line read is a user turn;
// the whole history goes through the checkpoint's chat template and the reply streams as it
// is generated. /exit (or end of input) ends the conversation, /reset forgets the history.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
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

int RunChat(const ChatOptions& o) {
  auto session = OpenSession(o.model);
  const Tokenizer& tok = session->RequireTokenizer();
  const ChatTemplate chat = ChatTemplate::FromTokenizer(tok);
  const int64_t context = session->ContextTokens();
  const SamplingParams sampling = ResolveSampling(o.sampling, session->model->sampling);
  Check(o.max_tokens < context, "--max-tokens (", o.max_tokens,
        ") must leave room for the prompt in the model's context of ", context, " tokens");
  const bool interactive = isatty(STDIN_FILENO) != 0;
  if (interactive)
    std::cerr << "moex chat: " << session->model->path
              << " (type /exit or Ctrl-D to end, /reset to forget the conversation)\n";

  std::vector<ChatMessage> history;
  if (!o.system.empty()) history.push_back({"system", o.system});
  Generator generator(*session->transformer);
  uint64_t turn = 0;
  std::string line;
  for (;;) {
    if (interactive) std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history.resize(o.system.empty() ? 0 : 1);
      std::cerr << "moex chat: conversation forgotten\n";
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
    const auto results = generator.Generate(
        {request}, [&](size_t, int32_t token) { std::cout << stream.Push(token) << std::flush; });
    std::cout << stream.Flush() << "\n" << std::flush;
    std::vector<int32_t> reply = results[0].tokens;
    if (results[0].finish_reason == "stop" && !reply.empty()) reply.pop_back();
    history.push_back({"assistant", tok.Decode(reply, true)});
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
  return [o] { return RunChat(*o); };
}

}  // namespace moex::cli

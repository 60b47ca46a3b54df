#include "cli/usage_hints.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

namespace moex::cli {

namespace {

// A command line's full name ("moex trace record").
std::string CommandPath(const CLI::App& command) {
  std::string path = command.get_name();
  for (const CLI::App* up = command.get_parent(); up != nullptr; up = up->get_parent())
    path = (up->get_parent() == nullptr ? std::string("moex") : up->get_name()) + " " + path;
  return path;
}

bool IsNumber(const std::string& arg) {
  char* end = nullptr;
  std::strtod(arg.c_str(), &end);
  return end != arg.c_str() && *end == '\0';
}

}  // namespace

std::string LlamaCppFlagHint(const std::string& flag) {
  static const std::map<std::string, std::string> kHints = {
      {"-ngl", "moex computes on the CPU; a model larger than memory keeps its experts on disk "
               "with --host-budget (e.g. --host-budget 8GiB)"},
      {"--n-gpu-layers", "moex computes on the CPU; offload experts with --host-budget"},
      {"--gpu-layers", "moex computes on the CPU; offload experts with --host-budget"},
      {"-ot", "moex places experts itself: --host-budget sizes the RAM cache, --policy picks "
              "what stays"},
      {"--override-tensor", "moex places experts itself: --host-budget and --policy"},
      {"--cpu-moe", "experts already run on the CPU; --host-budget offloads them to disk"},
      {"-fa", "attention is always fused in moex; drop the flag"},
      {"--flash-attn", "attention is always fused in moex; drop the flag"},
      {"--mlock", "moex manages expert memory itself (--host-budget); drop the flag"},
      {"--no-mmap", "moex maps the weights and caches experts itself; drop the flag"},
      {"-b", "`moex serve` batches with --max-batch-tokens and --prefill-chunk"},
      {"--batch-size", "`moex serve` batches with --max-batch-tokens and --prefill-chunk"},
      {"-ub", "`moex serve` batches with --max-batch-tokens and --prefill-chunk"},
      {"--ubatch-size", "`moex serve` batches with --max-batch-tokens and --prefill-chunk"},
      {"-np", "`moex serve --max-running N` runs N requests at once"},
      {"--parallel", "`moex serve --max-running N` runs N requests at once"},
      {"-cnv", "for a conversation run `moex chat`"},
      {"--conversation", "for a conversation run `moex chat`"},
      {"-i", "for a conversation run `moex chat`"},
      {"--interactive", "for a conversation run `moex chat`"},
      {"-sys", "pass the system message with --system"},
      {"--system-prompt", "pass the system message with --system"},
      {"-hf", "moex downloads nothing: pass a local GGUF or HF directory with -m"},
      {"--hf-repo", "moex downloads nothing: pass a local GGUF or HF directory with -m"},
      {"--jinja", "moex always applies the model's own chat template; drop the flag"},
      {"--chat-template", "moex applies the model's own chat template (tokenizer_config.json or "
                          "the GGUF's tokenizer.chat_template)"},
      {"-r", "stop strings are the API's `stop` field (`moex serve`)"},
      {"--reverse-prompt", "stop strings are the API's `stop` field (`moex serve`)"},
      {"--ignore-eos", "use --ignore-eos with `moex generate`"},
      {"--color", "drop the flag"},
      {"-no-cnv", "`moex generate` never enters a conversation; drop the flag"},
      {"--no-conversation", "`moex generate` never enters a conversation; drop the flag"},
      {"--log-disable", "moex logs warnings and errors only; drop the flag"},
      {"--mirostat", "moex samples with --temp, --top-k, --top-p, --min-p and penalties"},
      {"--typical", "moex samples with --temp, --top-k, --top-p, --min-p and penalties"},
      {"--dry-multiplier", "moex's repetition control is --repeat-penalty"},
      {"--xtc-probability", "moex samples with --temp, --top-k, --top-p and --min-p"},
      {"--host", "the HTTP server is `moex serve`"},
      {"--port", "the HTTP server is `moex serve`"},
  };
  auto it = kHints.find(flag);
  return it == kHints.end() ? "" : it->second;
}

std::string LlamaCppFlagMessage(const CLI::App& command, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (const size_t eq = arg.find('='); eq != std::string::npos) arg.resize(eq);
    const std::string hint = LlamaCppFlagHint(arg);
    if (hint.empty() || command.get_option_no_throw(arg) != nullptr) continue;
    return "unknown option '" + arg + "' for `" + CommandPath(command) + "` (" + hint + "); `" +
           CommandPath(command) + " --help` lists its options";
  }
  return "";
}

std::string UnexpectedArgumentMessage(const CLI::App& command, int argc,
                                      const char* const* argv) {
  const std::string help = "`" + CommandPath(command) + " --help` lists its options";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-' || IsNumber(arg)) continue;
    if (arg == "--") break;
    if (const size_t eq = arg.find('='); eq != std::string::npos) arg.resize(eq);
    if (command.get_option_no_throw(arg) != nullptr) continue;
    bool is_command = false;  // `moex --version`, or a parent's option.
    for (const CLI::App* up = command.get_parent(); up != nullptr; up = up->get_parent())
      is_command = is_command || up->get_option_no_throw(arg) != nullptr;
    if (is_command) continue;
    const std::string hint = LlamaCppFlagHint(arg);
    return "unknown option '" + arg + "' for `" + CommandPath(command) + "`" +
           (hint.empty() ? "" : " (" + hint + ")") + "; " + help;
  }
  // No unknown option: a word where none belongs (a value without its option, or one too
  // many).
  const std::vector<std::string> extras = command.remaining();
  for (int i = 1; i < argc; ++i)
    if (std::find(extras.begin(), extras.end(), argv[i]) != extras.end())
      return "unexpected argument '" + std::string(argv[i]) + "' for `" + CommandPath(command) +
             "` (every value follows its option, e.g. -p \"text\"); " + help;
  return "unexpected arguments; " + help;
}

}  // namespace moex::cli

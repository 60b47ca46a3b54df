// `moex tokenize`: the token ids of a text as JSON.
#include <iostream>

#include "cli/commands.h"
#include "cli/session.h"
#include "core/error.h"

namespace moex::cli {

namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool no_bos = false;
};

int RunTokenize(const TokenizeOptions& o) {
  const std::string path = o.model.empty() ? DefaultModelPath() : o.model;
  std::unique_ptr<Tokenizer> tok = LoadTokenizerIfPresent(path);
  Check(tok != nullptr, "no tokenizer found for model '", path, "'");
  const std::vector<int32_t> ids = tok->Encode(o.text, !o.no_bos && tok->add_bos_default());
  std::cout << nlohmann::json(ids).dump() << "\n";
  return 0;
}

}  // namespace

Runner AddTokenizeCommand(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text as JSON");
  cmd->add_option("--model", o->model, "HF directory, tokenizer file or .gguf (default: demo)");
  cmd->add_option("--text", o->text, "text to tokenize")->required();
  cmd->add_flag("--no-bos", o->no_bos, "do not add the beginning-of-sequence token");
  return [o] { return RunTokenize(*o); };
}

}  // namespace moex::cli

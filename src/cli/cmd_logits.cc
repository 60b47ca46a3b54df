// `moex logits`: float32 logits for every position of a prompt, written raw (little-endian,
// [tokens, vocab] row-major) for comparison against reference implementations.
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/session.h"
#include "core/error.h"

namespace moex::cli {

namespace {

struct LogitsOptions {
  ModelOptions model;
  std::string prompt;
  std::string prompt_ids;
  std::string out;
};

int RunLogits(const LogitsOptions& o) {
  Check(o.prompt.empty() != o.prompt_ids.empty(), "pass exactly one of --prompt or --prompt-ids");
  auto session = OpenSession(o.model);
  std::vector<int32_t> ids;
  if (!o.prompt_ids.empty()) {
    ids = ParseIdList(o.prompt_ids);
  } else {
    const Tokenizer& tok = session->RequireTokenizer();
    ids = tok.Encode(o.prompt, tok.add_bos_default());
  }
  const ModelConfig& c = session->model->config;
  for (int32_t id : ids)
    Check(id < c.vocab_size, "token id ", id, " is outside the vocabulary (", c.vocab_size,
          " tokens)");
  KvCache cache(c, static_cast<int64_t>(ids.size()));
  BatchItem item{&cache, ids, true};
  const std::vector<float> logits = session->transformer->Forward({&item, 1});
  std::ofstream out(o.out, std::ios::binary | std::ios::trunc);
  Check(static_cast<bool>(out), "cannot open '", o.out, "' for writing");
  out.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(float)));
  out.close();
  Check(static_cast<bool>(out), "failed writing '", o.out, "' (disk full?)");
  nlohmann::json summary = {{"tokens", ids}, {"vocab_size", c.vocab_size}, {"out", o.out}};
  std::cout << summary.dump() << "\n";
  return 0;
}

}  // namespace

Runner AddLogitsCommand(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "write float32 logits for every prompt position");
  AddModelOptions(*cmd, o->model);
  cmd->add_option("--prompt", o->prompt, "prompt text");
  cmd->add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids");
  cmd->add_option("--out", o->out, "output file (raw float32, [tokens, vocab])")->required();
  return [o] { return RunLogits(*o); };
}

}  // namespace moex::cli

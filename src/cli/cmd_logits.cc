// `moex logits`: float32 logits for every position of a prompt, written raw (little-endian,
// [tokens, vocab] row-major) for comparison against reference implementations.
#include <iostream>

#include "cli/commands.h"
#include "cli/session.h"
#include "core/error.h"
#include "io/output_file.h"
#include "io/output_guard.h"

namespace moex::cli {

namespace {

struct LogitsOptions {
  ModelOptions model;
  PromptOptions prompt;
  std::string out;
  bool force = false;
};

int RunLogits(const LogitsOptions& o) {
  std::vector<std::string> reads = ModelReads(o.model);
  reads.push_back(o.prompt.file);
  CheckOutputPath(o.out, {.flag = "--out", .reads = reads, .force = o.force});
  auto session = OpenSession(o.model);
  const std::vector<int32_t> ids = session->PromptTokens(o.prompt);
  const ModelConfig& c = session->model->config;
  KvCache cache(c, static_cast<int64_t>(ids.size()));
  BatchItem item{&cache, ids, true};
  const std::vector<float> logits = session->transformer->Forward({&item, 1});
  // Written to a temporary renamed into place: a full disk leaves no partial file.
  OutputFile out(o.out);
  out.Write(logits.data(), logits.size() * sizeof(float));
  out.Commit();
  nlohmann::json summary = {{"tokens", ids}, {"vocab_size", c.vocab_size}, {"out", o.out}};
  std::cout << summary.dump() << "\n";
  return 0;
}

}  // namespace

Runner AddLogitsCommand(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "write float32 logits for every prompt position");
  AddModelOptions(*cmd, o->model);
  AddPromptOptions(*cmd, o->prompt, true);
  cmd->add_option("--out", o->out, "output file (raw float32, [tokens, vocab])")->required();
  cmd->add_flag("--force", o->force, "replace an existing --out file");
  return [o] { return RunLogits(*o); };
}

}  // namespace moex::cli

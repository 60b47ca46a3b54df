// What every model-running command shares: the loaded model, its tokenizer (if it ships
// one), the MoE executor chosen by the offload options, and the transformer over them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/peak_rss.h"
#include "engine/moe_executor.h"
#include "engine/sampler.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "sim/routing_replay.h"
#include "text/tokenizer.h"

namespace moex::cli {

struct ModelOptions {
  std::string model;  // Empty: the bundled demo model.
  int threads = 0;    // 0: MOEX_THREADS or all cores.
  // --activations: how block-quantized weights meet activations (kernels/activation_precision.h).
  std::string activations = "int8";
  // Offloading: empty host_budget keeps every expert resident (no expert store).
  std::string host_budget;
  std::string policy = "lru";
  std::vector<std::string> learn_from;  // --learn-from traces.
  std::string policy_state;             // --policy-state file.
  std::string policy_worker = "async";
  std::string replay_routing;  // --replay-routing trace: MoE layers follow its routes.
  std::string store;           // Empty: next to the model.
  uint64_t seed = 0;           // For randomised policies.
  int64_t ctx_size = 0;        // -c: the context a sequence may use; 0: the model's.
  // Without -c, the tokens the command's run needs (bench: prompt + generated), when it
  // knows them: the KV cache is sized for those instead of the model's whole context.
  int64_t run_tokens = 0;
  int kv_sequences = 1;        // Sequences holding a KV cache at once (--host-budget auto).
  // --expert-parallel: the routed experts spread over the ranks of `mpirun -np N`
  // (docs/expert-parallel.md), placed by --placement or balanced; --ep-timeout bounds every
  // wait on another rank.
  bool expert_parallel = false;
  std::string placement;
  double ep_timeout_s = 60;
};

// Registers --model (-m), --threads (-t), --ctx-size (-c), --activations, --host-budget,
// --policy, --store and the expert-parallel flags on a subcommand.
void AddModelOptions(CLI::App& cmd, ModelOptions& options);

// Sampling flags, named as llama.cpp names them; those not given take the model's defaults
// (model/sampling_defaults.h).
struct SamplingOptions {
  std::optional<float> temperature, top_p, min_p, repeat_penalty, presence_penalty,
      frequency_penalty;
  std::optional<int> top_k, repeat_last_n;
  std::optional<uint64_t> seed;
};

// Registers --temp (--temperature), --top-k, --top-p, --min-p, --repeat-penalty,
// --repeat-last-n, --presence-penalty, --frequency-penalty and --seed (-s).
void AddSamplingOptions(CLI::App& cmd, SamplingOptions& options, const char* seed_help);

// The flags given over the model's defaults; the seed is random unless --seed is given.
// Throws Error for an out-of-range value.
SamplingParams ResolveSampling(const SamplingOptions& options, const SamplingDefaults& defaults);

// The bundled demo model's directory (MOEX_MODEL overrides it).
std::string DefaultModelPath();

// What a command with these options reads (the model, --learn-from traces, the
// --replay-routing trace), for the output rules of io/output_guard.h. The policy state and
// the expert store are read and rewritten by design, so they are not listed.
std::vector<std::string> ModelReads(const ModelOptions& options);

// A prompt as text (optionally wrapped in the chat template) or as token ids.
struct PromptOptions {
  std::string text;  // "-": read from stdin.
  std::string file;  // --prompt-file: the prompt is this file's content.
  std::string ids;
  bool chat = false;
  std::string system;
};

// Registers --prompt (-p), --prompt-file (-f) and --prompt-ids, and --chat/--system when
// `with_chat`.
void AddPromptOptions(CLI::App& cmd, PromptOptions& options, bool with_chat);

// The prompt text of --prompt (stdin for "-") or --prompt-file, without one trailing
// newline; throws Error when the file cannot be read or the prompt is empty.
std::string PromptText(const PromptOptions& options);

struct Session {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // Null when the model ships none or it is unusable.
  // Why the model's tokenizer could not be loaded (unknown kind or pre-tokenizer, corrupt
  // file): the model still runs on token ids, and text is refused with this reason.
  std::string tokenizer_error;
  // --replay-routing; declared before the executor, whose policy reads its router weights.
  std::unique_ptr<sim::TraceRouting> routing_replay;
  std::unique_ptr<MoeExecutor> executor;
  std::unique_ptr<Transformer> transformer;
  double load_ms = 0;

  // The tokenizer or a clear error saying to pass token ids instead.
  const Tokenizer& RequireTokenizer() const;
  // The prompt's token ids, checked against the vocabulary; throws Error with the reason.
  std::vector<int32_t> PromptTokens(const PromptOptions& prompt) const;
  // End-of-sequence ids of the checkpoint's config and of its tokenizer.
  std::vector<int32_t> StopIds() const;
  // The tokens one sequence may hold: --ctx-size, or the model's context.
  int64_t ContextTokens() const;
  // Saves what the offload policy learned to --policy-state, if given (end of a run).
  void SavePolicyState() const;
  // Adds "routing_replay" to a command's JSON report when the routes were replayed.
  void AddRoutingReplayJson(nlohmann::json& out) const;

  ModelOptions options;
};

// Opens the model and its executor. On a worker rank of --expert-parallel (any rank but 0)
// it serves experts until rank 0 ends the run, then ends the process: it never returns.
std::unique_ptr<Session> OpenSession(const ModelOptions& options);

// Whether this process is a worker rank of an --expert-parallel run (starts MPI to know):
// a command that would open ports or files of its own before OpenSession checks it first.
bool IsExpertParallelWorker(const ModelOptions& options);

// The model's tokenizer (tokenizer.json / tokenizer.model in an HF directory, or a GGUF's
// vocabulary), or null when the model ships none.
std::unique_ptr<Tokenizer> LoadTokenizerIfPresent(const std::string& path);

// Parses "1,2,3" (spaces allowed); throws Error on anything else.
std::vector<int32_t> ParseIdList(const std::string& text);

}  // namespace moex::cli

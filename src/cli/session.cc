#include "cli/session.h"

#include "cli/auto_budget.h"
#include "cli/policy_setup.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include <csignal>
#include <cstdio>

#include "core/budget.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "dist/expert_parallel.h"
#include "engine/kv_cache.h"
#include "io/gguf_file.h"
#include "io/input_file.h"
#include "kernels/activation_precision.h"
#include "text/chat_template.h"
#include "tiers/host_tier.h"
#include "trace/routing_counts.h"

namespace moex::cli {

void AddModelOptions(CLI::App& cmd, ModelOptions& o) {
  cmd.add_option("-m,--model", o.model,
                 "HF checkpoint directory or .gguf file (default: the bundled demo model)");
  cmd.add_option("-t,--threads", o.threads, "compute threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option("-c,--ctx-size", o.ctx_size,
                 "tokens one sequence may hold, prompt and reply (0: the model's context)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd.add_option("--activations", o.activations,
                 "activations of block-quantized weights (q4_K, q8_0, ...): int8 (integer dot "
                 "products, as llama.cpp) or f32 (exact dot of the dequantised weights)")
      ->capture_default_str()
      ->check(CLI::IsMember({"int8", "f32"}));
  cmd.add_option("--host-budget", o.host_budget,
                 "offload experts: host cache budget, bytes (4GiB), share of expert bytes "
                 "(25%) or auto (what memory allows); default: all experts resident when "
                 "they fit, else auto");
  cmd.add_option("--policy", o.policy,
                 "offload policy spec, e.g. lru, nextgate+lfu (`moex policies` lists them)")
      ->capture_default_str();
  cmd.add_option("--learn-from", o.learn_from,
                 "traces the policy learns from before it serves (comma-separated)")
      ->delimiter(',');
  cmd.add_option("--policy-state", o.policy_state,
                 "file of what the policy learned: loaded when it exists, saved at the end");
  cmd.add_option("--policy-worker", o.policy_worker,
                 "where heavy policy work runs: async (a worker thread) or sync (inline, "
                 "deterministic)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sync", "async"}));
  cmd.add_option("--store", o.store,
                 "expert store file (default: in the cache directory, named after the model's "
                 "content; `moex store list` shows them)");
  cmd.add_option("--replay-routing", o.replay_routing,
                 "MoE layers follow this trace's recorded routes instead of the router (same "
                 "topology; outputs become meaningless, timing and I/O stay real)");
  cmd.add_flag("--expert-parallel", o.expert_parallel,
               "spread the routed experts over the ranks of `mpirun -np N` (rank 0 runs the "
               "model and answers; docs/expert-parallel.md)");
  cmd.add_option("--placement", o.placement,
                 "with --expert-parallel: JSON file of the rank of each expert (default: "
                 "balanced)");
  cmd.add_option("--ep-timeout", o.ep_timeout_s,
                 "with --expert-parallel: seconds to wait for another rank before the run "
                 "ends with an error naming it")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
}

void AddSamplingOptions(CLI::App& cmd, SamplingOptions& o, const char* seed_help) {
  cmd.add_option("--temp,--temperature", o.temperature,
                 "sampling temperature, 0 = greedy (default: the model's generation config)");
  cmd.add_option("--top-k", o.top_k, "sample among the k most likely tokens (0 = all)");
  cmd.add_option("--top-p", o.top_p, "nucleus sampling mass");
  cmd.add_option("--min-p", o.min_p,
                 "drop tokens below this share of the most likely one's "
                 "probability");
  cmd.add_option("--repeat-penalty", o.repeat_penalty,
                 "divide the logits of recent tokens by this (1 = off)");
  cmd.add_option("--repeat-last-n", o.repeat_last_n,
                 "how many recent tokens --repeat-penalty looks at (-1: the whole context)");
  cmd.add_option("--presence-penalty", o.presence_penalty,
                 "subtract from the logit of every token already generated");
  cmd.add_option("--frequency-penalty", o.frequency_penalty,
                 "subtract this times the count of each token already generated");
  cmd.add_option("-s,--seed", o.seed, seed_help);
}

SamplingParams ResolveSampling(const SamplingOptions& o, const SamplingDefaults& d) {
  SamplingParams p;
  p.temperature = o.temperature.value_or(d.temperature);
  p.top_k = o.top_k.value_or(d.top_k);
  p.top_p = o.top_p.value_or(d.top_p);
  p.min_p = o.min_p.value_or(d.min_p);
  p.repetition_penalty = o.repeat_penalty.value_or(d.repetition_penalty);
  // --repeat-penalty is llama.cpp's, so its window is llama.cpp's 64 unless given.
  p.repeat_last_n = o.repeat_last_n.value_or(o.repeat_penalty ? 64 : d.repeat_last_n);
  p.presence_penalty = o.presence_penalty.value_or(0.0f);
  p.frequency_penalty = o.frequency_penalty.value_or(0.0f);
  p.seed = o.seed ? *o.seed : std::random_device{}();
  p.Validate();
  return p;
}

std::vector<std::string> ModelReads(const ModelOptions& options) {
  std::vector<std::string> reads = options.learn_from;
  reads.push_back(options.model.empty() ? DefaultModelPath() : options.model);
  reads.push_back(options.replay_routing);
  return reads;
}

std::string DefaultModelPath() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("MOEX_MODEL"); env != nullptr && *env) return env;
  // Found relative to the executable, not to where it was built: build/moex in a checkout
  // and PREFIX/bin/moex after `cmake --install` (PREFIX/share/moex/models).
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  std::vector<fs::path> candidates;
  for (const fs::path& base : {exe_dir / "..", exe_dir / ".." / "..", exe_dir}) {
    candidates.push_back(base / "models" / "olmoe-demo");
    candidates.push_back(base / "share" / "moex" / "models" / "olmoe-demo");
  }
  std::string looked;
  for (const fs::path& c : candidates) {
    if (fs::exists(c / "config.json", ec)) return fs::weakly_canonical(c, ec).string();
    looked += (looked.empty() ? "" : ", ") + c.lexically_normal().string();
  }
  Fail("no --model given and the bundled demo model is not beside this executable (looked in ",
       looked, "); pass --model or set MOEX_MODEL");
}

std::unique_ptr<Tokenizer> LoadTokenizerIfPresent(const std::string& path) {
  namespace fs = std::filesystem;
  bool has_tokenizer = false;
  if (fs::is_regular_file(path)) {
    // A GGUF carries a vocabulary only if it has tokenizer.ggml.tokens; other single files
    // (tokenizer.json, tokenizer.model) are tokenizers themselves.
    const bool gguf = path.size() > 5 && path.substr(path.size() - 5) == ".gguf";
    has_tokenizer = !gguf || GgufFile(path).Find("tokenizer.ggml.tokens") != nullptr;
  } else {
    has_tokenizer = fs::exists(fs::path(path) / "tokenizer.json") ||
                    fs::exists(fs::path(path) / "tokenizer.model");
  }
  return has_tokenizer ? LoadTokenizer(path) : nullptr;
}

const Tokenizer& Session::RequireTokenizer() const {
  Check(tokenizer_error.empty(), "model '", model->path, "': its tokenizer cannot be used (",
        tokenizer_error, "): pass token ids with --prompt-ids instead of text");
  Check(tokenizer != nullptr, "model '", model->path,
        "' ships no tokenizer: pass token ids with --prompt-ids instead of text");
  return *tokenizer;
}

void AddPromptOptions(CLI::App& cmd, PromptOptions& o, bool with_chat) {
  cmd.add_option("-p,--prompt", o.text, "prompt text (- reads it from stdin)");
  cmd.add_option("-f,--prompt-file", o.file, "read the prompt text from this file");
  cmd.add_option("--prompt-ids", o.ids, "prompt as comma-separated token ids");
  if (!with_chat) return;
  cmd.add_flag("--chat", o.chat, "format the prompt as a user turn with the chat template");
  cmd.add_option("--system", o.system, "system message for --chat");
}

namespace {
// A prompt longer than this is surely not one (`--prompt-file /dev/zero`, a wrong file):
// reading stops there instead of running out of memory.
constexpr size_t kMaxPromptBytes = size_t{64} << 20;

std::string ReadBounded(std::istream& in, const std::string& what) {
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    Check(text.size() <= kMaxPromptBytes, what, " holds more than ", kMaxPromptBytes >> 20,
          " MiB; a prompt that long is not a prompt");
  }
  return text;
}
}  // namespace

std::string PromptText(const PromptOptions& o) {
  if (o.file.empty() && o.text != "-") return o.text;
  std::string text;
  if (!o.file.empty()) {
    std::ifstream in(o.file, std::ios::binary);
    Check(in.is_open() && !std::filesystem::is_directory(o.file), "cannot read prompt file '",
          o.file, "'");
    text = ReadBounded(in, "prompt file '" + o.file + "'");
  } else {
    text = ReadBounded(std::cin, "the prompt on stdin");
  }
  // One trailing newline is the file's end, not part of the prompt.
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  Check(!text.empty(), "the prompt ", o.file.empty() ? "on stdin" : "file '" + o.file + "'",
        " is empty");
  return text;
}

std::vector<int32_t> Session::PromptTokens(const PromptOptions& options) const {
  const int given = !options.text.empty() + !options.file.empty() + !options.ids.empty();
  Check(given == 1, "pass exactly one of --prompt, --prompt-file or --prompt-ids");
  PromptOptions o = options;
  if (o.ids.empty()) o.text = PromptText(options);
  std::vector<int32_t> ids;
  if (!o.ids.empty()) {
    ids = ParseIdList(o.ids);
  } else if (o.chat) {
    // The template writes any BOS itself, as text that encodes to the special token.
    const Tokenizer& tok = RequireTokenizer();
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.text});
    ids = tok.Encode(ApplyChatTemplate(ChatTemplate::FromTokenizer(tok), messages, true), false);
  } else {
    const Tokenizer& tok = RequireTokenizer();
    ids = tok.Encode(o.text, tok.add_bos_default());
  }
  Check(!ids.empty(), "the prompt encodes to no tokens");
  // Every command that runs a prompt holds its KV cache: beyond the context it is neither
  // meaningful nor affordable (a prompt 800 times the context ran `logits` out of memory).
  Check(static_cast<int64_t>(ids.size()) <= model->config.max_position_embeddings, "the prompt is ",
        ids.size(), " tokens, more than the model's context of ",
        model->config.max_position_embeddings);
  for (int32_t id : ids)
    Check(id < model->config.vocab_size, "prompt token id ", id, " is outside the vocabulary (",
          model->config.vocab_size, " tokens)");
  return ids;
}

int64_t Session::ContextTokens() const {
  if (options.ctx_size > 0) return options.ctx_size;
  const int64_t model_context = model->config.max_position_embeddings;
  return options.run_tokens > 0 ? std::min(options.run_tokens, model_context) : model_context;
}

std::vector<int32_t> Session::StopIds() const {
  std::vector<int32_t> ids(model->config.eos_token_ids.begin(), model->config.eos_token_ids.end());
  if (tokenizer)
    for (int32_t id : tokenizer->eos_ids()) ids.push_back(id);
  return ids;
}

namespace {

// The --host-budget a run uses: "auto" (and no budget for a model that does not fit in
// memory whole) sized by cli/auto_budget.h, saying what it chose; a budget larger than the
// memory available is refused. "" keeps every expert resident.
std::string ChooseHostBudget(const ModelOptions& o, const Model& model, int64_t context) {
  const int64_t experts = static_cast<int64_t>(model.TotalExpertBytes());
  if (!o.host_budget.empty() && o.host_budget != "auto") {
    const int64_t asked = ParseBudget(o.host_budget, experts);
    const int64_t available = AvailableMemoryBytes();
    Check(asked <= available, "--host-budget ", o.host_budget, " (", FormatBytes(asked),
          ") is more than the ", FormatBytes(available),
          " of memory available: the cache would be swapped out; --host-budget auto sizes it");
    return o.host_budget;
  }
  const AutoBudget a = ComputeAutoBudget(
      AvailableMemoryBytes(), std::max<int64_t>(0, ModelFileBytes(model.path) - experts),
      (KvCache::BytesPerToken(model.config) * context + KvCache::StateBytes(model.config)) *
          o.kv_sequences,
      experts);
  if (a.fits) {
    if (o.host_budget == "auto")
      std::fprintf(stderr, "moex: --host-budget auto: every expert fits (%s): all stay resident\n",
                   a.Describe().c_str());
    return "";
  }
  const int64_t one_pass =
      experts / std::max(1, model.config.num_experts) * model.config.num_experts_per_tok;
  Check(a.budget >= one_pass, "the model does not fit in memory: ", a.Describe(),
        " leaves less than the experts of one token; free memory, shorten the context (-c) or "
        "give --host-budget in bytes");
  std::fprintf(stderr, "moex: %s: %s; the rest are read from the expert store\n",
               o.host_budget == "auto" ? "--host-budget auto"
                                       : "the model does not fit in memory, so experts are "
                                         "offloaded (--host-budget auto)",
               a.Describe().c_str());
  return std::to_string(a.budget);
}

// Without -c, the model's whole context, unless its KV cache (for every sequence the run
// holds) would take more than half the memory the dense weights leave: then the longest
// context that fits that half, in whole 1024-token steps and at least 4096 tokens, said on
// stderr. Llama 4's 10M-token context would otherwise size a 160 GiB cache and refuse to run.
int64_t DefaultContext(const ModelOptions& o, const Model& model) {
  const int64_t model_context = model.config.max_position_embeddings;
  const int64_t per_token = KvCache::BytesPerToken(model.config) * std::max(1, o.kv_sequences);
  const int64_t dense = std::max<int64_t>(
      0, ModelFileBytes(model.path) - static_cast<int64_t>(model.TotalExpertBytes()));
  const int64_t room = (AvailableMemoryBytes() - dense) / 2;
  if (per_token <= 0 || room / per_token >= model_context) return model_context;
  const int64_t context =
      std::min(model_context, std::max<int64_t>(4096, room / per_token / 1024 * 1024));
  std::fprintf(stderr,
               "moex: the model's context of %lld tokens would need %s of KV cache; using %lld "
               "(half the memory the dense weights leave); -c sets it\n",
               static_cast<long long>(model_context),
               FormatBytes(per_token * model_context).c_str(), static_cast<long long>(context));
  return context;
}

PolicySetup PolicySetupOf(const ModelOptions& o) {
  PolicySetup setup;
  setup.spec = o.policy;
  setup.learn_from = o.learn_from;
  setup.state_path = o.policy_state;
  return setup;
}
}  // namespace

void Session::SavePolicyState() const {
  auto* offload = dynamic_cast<OffloadMoeExecutor*>(executor.get());
  if (offload == nullptr || options.policy_state.empty()) return;
  cli::SavePolicyState(PolicySetupOf(options), offload->tier().controller().policy(),
                       offload->tier().policy_facts());
}

void Session::AddRoutingReplayJson(nlohmann::json& out) const {
  if (routing_replay) out["routing_replay"] = routing_replay->ToJson();
}

std::unique_ptr<Session> OpenSession(const ModelOptions& options) {
  Check(options.expert_parallel || options.placement.empty(),
        "--placement needs --expert-parallel");
  // Before anything that can fail: a rank that exits without MPI ends the whole job.
  if (options.expert_parallel) dist::MpiTransport::Start();
  if (options.threads > 0) ThreadPool::SetGlobalThreads(options.threads);
  const auto precision = kernels::ParseActivationPrecision(options.activations);
  Check(precision.has_value(), "--activations must be int8 or f32, not '", options.activations,
        "'");
  kernels::SetActivationPrecision(*precision);
  const std::string path = options.model.empty() ? DefaultModelPath() : options.model;
  const Stopwatch watch;
  auto session = std::make_unique<Session>();
  session->options = options;  // ContextTokens() reads --ctx-size from it.
  session->model = LoadModel(path);
  Check(options.ctx_size <= session->model->config.max_position_embeddings, "--ctx-size ",
        options.ctx_size, " exceeds the model's context of ",
        session->model->config.max_position_embeddings, " tokens");
  if (options.ctx_size == 0 && options.run_tokens == 0)
    session->options.ctx_size = DefaultContext(options, *session->model);
  try {
    session->tokenizer = LoadTokenizerIfPresent(path);
  } catch (const Error& e) {
    // The weights do not depend on it: run on ids, refuse text (RequireTokenizer).
    session->tokenizer_error = e.what();
    Log(LogLevel::kWarn, "the model's tokenizer cannot be used (", e.what(), "): token ids only");
  }
  // A tokenizer with more ids than the embedding has rows would index past it.
  if (session->tokenizer)
    Check(session->tokenizer->vocab_size() <= session->model->config.vocab_size, "model '", path,
          "': its tokenizer has ", session->tokenizer->vocab_size(),
          " tokens, more than the model's vocabulary of ", session->model->config.vocab_size);
  if (!options.replay_routing.empty()) {
    session->routing_replay =
        std::make_unique<sim::TraceRouting>(options.replay_routing, session->model->config);
    std::fprintf(stderr,
                 "moex: routing replayed from %s: the model's outputs are meaningless; timing, "
                 "I/O and cache behaviour are real%s\n",
                 options.replay_routing.c_str(),
                 session->routing_replay->carries_gate_inputs()
                     ? ""
                     : " (the trace has no gate inputs: policies that predict from them "
                       "cannot run; record it with --hidden f32)");
  }
  if (options.expert_parallel) {
    Check(options.learn_from.empty() && options.policy_state.empty() &&
              options.replay_routing.empty(),
          "--learn-from, --policy-state and --replay-routing do not combine with "
          "--expert-parallel yet");
    Check(options.host_budget != "auto",
          "--host-budget auto does not combine with --expert-parallel yet: give each rank's "
          "budget in bytes or as a share of its experts (e.g. --host-budget 25%)");
    dist::ExpertParallelOptions ep;
    // Rank 0 decides the placement (the file need not exist on the other hosts): a
    // placement file, or a routing trace whose counts the balanced placement spreads.
    if (!options.placement.empty() && dist::MpiTransport::Start().rank() == 0) {
      Check(RegularFileExists(options.placement), "--placement ", options.placement,
            ": no such file");
      std::ifstream first(options.placement, std::ios::binary);
      first >> std::ws;
      if (first.peek() == '{') {
        ep.placement_path = options.placement;
      } else {
        trace::TraceReader routing(options.placement);
        ep.frequency = trace::RoutedTokenCounts(routing);
        ep.placement_label = "balanced by the routing of " + options.placement;
      }
    }
    if (!options.host_budget.empty()) {
      // Each rank offloads its own experts with these options (docs/expert-parallel.md).
      OffloadOptions offload;
      offload.store_path = options.store;
      offload.host_budget = options.host_budget;
      offload.policy.spec = options.policy;
      offload.policy.make = MakePolicyMaker(PolicySetupOf(options));
      offload.policy.worker = policy::PolicyWorker::ParseMode(options.policy_worker);
      offload.policy.seed = options.seed;
      ep.offload = offload;
    }
    ep.timeout_s = options.ep_timeout_s;
    ep.startup_timeout_s = std::max(600.0, options.ep_timeout_s);
    // A worker ends when rank 0 says so; mpirun forwards Ctrl-C and SIGTERM to every rank,
    // and rank 0 finishes its requests first.
    if (dist::MpiTransport::Start().rank() != 0) {
      std::signal(SIGINT, SIG_IGN);
      std::signal(SIGTERM, SIG_IGN);
    }
    session->executor = dist::StartExpertParallel(*session->model, ep);
    // A worker rank has served until rank 0 ended the run; MPI finalizes at exit.
    if (!session->executor) std::exit(0);
    session->transformer = std::make_unique<Transformer>(*session->model, *session->executor);
    session->load_ms = watch.ElapsedMs();
    return session;
  }
  const std::string host_budget =
      ChooseHostBudget(options, *session->model, session->ContextTokens());
  if (host_budget.empty()) {
    Check(options.learn_from.empty() && options.policy_state.empty(),
          "--learn-from and --policy-state need offloading (--host-budget): a fully resident "
          "model has no policy");
    session->executor = std::make_unique<ResidentMoeExecutor>(*session->model);
  } else {
    OffloadOptions offload;
    offload.store_path = options.store;
    offload.host_budget = host_budget;
    offload.policy.spec = options.policy;
    offload.policy.make = MakePolicyMaker(PolicySetupOf(options));
    offload.policy.worker = policy::PolicyWorker::ParseMode(options.policy_worker);
    offload.policy.seed = options.seed;
    if (session->routing_replay)
      offload.policy.adjust_facts = [replay = session->routing_replay.get()](
                                        policy::PolicyFacts& f) { replay->AdjustFacts(f); };
    session->executor = std::make_unique<OffloadMoeExecutor>(*session->model, offload);
  }
  session->transformer = std::make_unique<Transformer>(*session->model, *session->executor);
  session->transformer->set_routing_source(session->routing_replay.get());
  session->options.host_budget = host_budget;  // What the run uses ("auto" resolved).
  session->load_ms = watch.ElapsedMs();
  return session;
}

bool IsExpertParallelWorker(const ModelOptions& options) {
  return options.expert_parallel && dist::MpiTransport::Start().rank() != 0;
}

std::vector<int32_t> ParseIdList(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    const auto last = item.find_last_not_of(" \t");
    Check(first != std::string::npos, "empty entry in token id list '", text, "'");
    item = item.substr(first, last - first + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      Fail("'", item, "' in token id list is not an integer");
    }
    Check(used == item.size() && v >= 0 && v < (1ll << 31), "'", item,
          "' in token id list is not a valid token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  Check(!ids.empty(), "token id list is empty");
  return ids;
}

}  // namespace moex::cli

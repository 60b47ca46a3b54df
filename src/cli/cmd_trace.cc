// `moex trace record`: runs a prompt set through the engine and writes the routing trace
// the simulator replays (docs/trace-format.md). `moex trace info`: what a trace holds.
// `moex trace import`: a routing log captured elsewhere, as a trace. `moex trace split`: a
// learning part and a test part by request (EVALUATION.md's 70/30).
#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "cli/commands.h"
#include "cli/session.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/generator.h"
#include "io/output_guard.h"
#include "io/prompt_set.h"
#include "trace/trace_import.h"
#include "trace/trace_reader.h"
#include "trace/trace_recorder.h"
#include "trace/trace_split.h"

namespace moex::cli {

namespace {

struct RecordOptions {
  ModelOptions model;
  std::string prompts;
  std::string format = "auto";
  std::string out;
  int limit = 0;  // 0: every prompt.
  int max_tokens = 32;
  int max_prompt_tokens = 0;  // 0: whatever fits the context with max_tokens.
  int batch = 1;
  bool chat = false;
  float temperature = 0.0f;
  uint64_t seed = 0;
  std::string probs = "f16";
  std::string hidden = "none";
  bool pooled = false;
  bool json = false;
  bool force = false;
};

// A trace may replace a trace; anything else needs --force.
OutputRules TraceOutput(const char* flag, std::vector<std::string> reads, bool force) {
  return {.flag = flag,
          .reads = std::move(reads),
          .force = force,
          .same_kind = [](const std::string& existing) {
            return FileStartsWith(existing,
                                  std::string(trace::kTraceMagic, sizeof trace::kTraceMagic));
          }};
}

int RunRecord(const RecordOptions& o) {
  std::vector<std::string> reads = ModelReads(o.model);
  reads.push_back(o.prompts);
  CheckOutputPath(o.out, TraceOutput("--out", reads, o.force));
  const std::vector<PromptEntry> prompts = LoadPromptSet(o.prompts, o.format);
  auto session = OpenSession(o.model);
  const Model& model = *session->model;
  session->RequireTokenizer();  // Prompt sets are text: fail before recording anything.
  const ModelConfig& config = model.config;

  trace::TraceHeader header;
  header.source = "moex trace record";
  header.model = trace::TraceModelOf(model);
  header.probs = trace::ParsePrecision(o.probs);
  header.hidden = trace::ParsePrecision(o.hidden);
  header.pooled = o.pooled;
  header.router_weights = header.hidden != trace::Precision::kNone;
  const size_t count =
      o.limit > 0 ? std::min<size_t>(prompts.size(), static_cast<size_t>(o.limit)) : prompts.size();
  const int64_t room = config.max_position_embeddings - o.max_tokens;
  Check(room > 0, "--max-tokens ", o.max_tokens, " leaves no room for a prompt in the context of ",
        config.max_position_embeddings);
  const int64_t max_prompt =
      o.max_prompt_tokens > 0 ? std::min<int64_t>(o.max_prompt_tokens, room) : room;
  header.info = {{"prompts", o.prompts},
                 {"prompt_format", o.format},
                 {"prompt_count", count},
                 {"max_tokens", o.max_tokens},
                 {"max_prompt_tokens", max_prompt},
                 {"batch", o.batch},
                 {"chat", o.chat},
                 {"temperature", o.temperature},
                 {"seed", o.seed}};

  // Prompts longer than the room are cut to their first tokens (their start carries the
  // request; the routing of a long prompt's tail adds little but length).
  std::vector<GenerationRequest> requests;
  int64_t truncated = 0;
  for (size_t i = 0; i < count; ++i) {
    if (prompts[i].text.empty()) continue;  // ShareGPT has a few empty turns.
    GenerationRequest r;
    PromptOptions prompt;
    prompt.text = prompts[i].text;
    prompt.chat = o.chat;
    std::vector<int32_t> ids = session->PromptTokens(prompt);
    if (static_cast<int64_t>(ids.size()) > max_prompt) {
      ids.resize(static_cast<size_t>(max_prompt));
      ++truncated;
    }
    r.prompt = std::move(ids);
    r.max_tokens = o.max_tokens;
    r.sampling = {o.temperature, 0, 1.0f, o.seed + i};
    r.sampling.Validate();
    r.stop_ids = session->StopIds();
    requests.push_back(std::move(r));
  }
  Check(!requests.empty(), "no prompt in ", o.prompts, " encodes to any token");

  trace::TraceWriter writer(o.out, header);
  trace::TraceRecorder recorder(writer, model);
  session->transformer->AddSink(&recorder);
  Generator generator(*session->transformer);
  const Stopwatch watch;
  int64_t generated = 0;
  GenerationTimings total;  // Summed over the generate calls, to set beside `moex sim`.
  Progress progress("recorded requests", static_cast<int64_t>(requests.size()));
  for (size_t begin = 0; begin < requests.size(); begin += static_cast<size_t>(o.batch)) {
    const size_t end = std::min(requests.size(), begin + static_cast<size_t>(o.batch));
    const std::vector<GenerationRequest> group(requests.begin() + static_cast<ptrdiff_t>(begin),
                                               requests.begin() + static_cast<ptrdiff_t>(end));
    for (const GenerationResult& r : generator.Generate(group))
      generated += static_cast<int64_t>(r.tokens.size());
    const GenerationTimings& t = generator.timings();
    total.prefill_ms += t.prefill_ms;
    total.decode_ms += t.decode_ms;
    total.decode_steps += t.decode_steps;
    progress.Update(static_cast<int64_t>(end));
  }
  session->transformer->RemoveSink(&recorder);
  writer.Finish();

  nlohmann::json out = {
      {"trace", o.out},
      {"model", model.path},
      {"requests", requests.size()},
      {"truncated_prompts", truncated},
      {"iterations", recorder.iterations()},
      {"tokens", recorder.tokens()},
      {"generated_tokens", generated},
      {"bytes", writer.bytes_written()},
      {"record_ms", watch.ElapsedMs()},
      {"timings",
       {{"prefill_ms", total.prefill_ms},
        {"decode_ms", total.decode_ms},
        {"decode_steps", total.decode_steps},
        {"ms_per_decode_step",
         total.decode_steps ? total.decode_ms / static_cast<double>(total.decode_steps) : 0.0}}},
      {"offload", session->executor->MetricsJson()}};
  session->AddRoutingReplayJson(out);
  session->SavePolicyState();
  if (o.json)
    std::cout << out.dump(2) << "\n";
  else
    std::cout << "wrote " << o.out << ": " << requests.size() << " requests, "
              << recorder.iterations() << " iterations, " << recorder.tokens() << " tokens, "
              << writer.bytes_written() << " bytes\n";
  return 0;
}

// Summary statistics: counts, and per MoE layer the distinct experts used and the share of
// routed slots taken by the 8 most popular experts (skew, which caching feeds on).
int RunInfo(const std::string& path, bool json) {
  trace::TraceReader reader(path);
  const trace::TraceHeader& h = reader.header();
  int64_t requests = 0, iterations = 0, tokens = 0, gates = 0;
  std::map<int, std::vector<int64_t>> use;  // Per layer: slots per expert.
  trace::TraceEvent e;
  while (reader.Next(&e)) {
    if (e.kind == trace::TraceEvent::kRequestBegin) ++requests;
    if (e.kind != trace::TraceEvent::kIteration) continue;
    ++iterations;
    tokens += static_cast<int64_t>(e.iteration.tokens.size());
    for (const trace::TraceGate& g : e.iteration.gates) {
      ++gates;
      std::vector<int64_t>& u = use[g.layer];
      u.resize(static_cast<size_t>(h.model.num_experts));
      for (int32_t id : g.ids) ++u[static_cast<size_t>(id)];
    }
  }
  nlohmann::json layers = nlohmann::json::array();
  for (auto& [layer, u] : use) {
    int64_t total = 0, distinct = 0;
    for (int64_t c : u) {
      total += c;
      distinct += c > 0;
    }
    std::vector<int64_t> sorted = u;
    std::sort(sorted.rbegin(), sorted.rend());
    int64_t top = 0;
    for (size_t i = 0; i < std::min<size_t>(8, sorted.size()); ++i) top += sorted[i];
    layers.push_back(
        {{"layer", layer},
         {"distinct_experts", distinct},
         {"top8_share", total ? static_cast<double>(top) / static_cast<double>(total) : 0}});
  }
  nlohmann::json out = trace::HeaderToJson(h);
  out["model"].erase("config");
  out["counts"] = {
      {"requests", requests}, {"iterations", iterations}, {"tokens", tokens}, {"gates", gates}};
  out["layers"] = layers;
  out["router_tensors"] = reader.tensors().Names().size();
  if (json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << path << ": " << h.source << ", model " << h.model.name << " ("
              << h.model.moe_layers.size() << " MoE layers x " << h.model.num_experts
              << " experts, top-" << h.model.top_k << ")\n"
              << requests << " requests, " << iterations << " iterations, " << tokens
              << " tokens; probs " << trace::PrecisionName(h.probs) << ", hidden "
              << trace::PrecisionName(h.hidden) << "\n";
  }
  return 0;
}

// `moex trace import`: a routing log captured elsewhere (vLLM, HF Switch) as a trace.
int RunImport(const trace::ImportOptions& o, bool json, bool force) {
  CheckOutputPath(o.output, TraceOutput("--out", {o.input, o.metadata}, force));
  const trace::ImportSummary s = trace::ImportRoutingLog(o);
  nlohmann::json out = {{"trace", o.output},          {"format", o.format},
                        {"input", o.input},           {"requests", s.requests},
                        {"iterations", s.iterations}, {"tokens", s.tokens},
                        {"layers", s.layers},         {"dropped_tokens", s.dropped_tokens}};
  if (!o.metadata.empty()) out["metadata"] = o.metadata;
  if (json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "wrote " << o.output << ": " << s.requests << " requests, " << s.iterations
            << " iterations, " << s.tokens << " tokens, " << s.layers << " MoE layers";
  if (s.dropped_tokens) std::cout << ", " << s.dropped_tokens << " warm-up tokens dropped";
  std::cout << "\n";
  return 0;
}

int RunSplit(const trace::SplitOptions& o, bool json, bool force) {
  Check(o.learn_out != o.test_out, "--learn and --test name the same file, ", o.test_out);
  CheckOutputPath(o.learn_out, TraceOutput("--learn", {o.input}, force));
  CheckOutputPath(o.test_out, TraceOutput("--test", {o.input}, force));
  const trace::SplitSummary s = trace::SplitTrace(o);
  auto part = [](const std::string& path, const trace::SplitPart& p) {
    return nlohmann::json{{"trace", path},
                          {"requests", p.requests},
                          {"first_request", p.first_request},
                          {"last_request", p.last_request},
                          {"iterations", p.iterations}};
  };
  if (json) {
    nlohmann::json out = {{"input", o.input},
                          {"learn_fraction", o.learn_fraction},
                          {"learn", part(o.learn_out, s.learn)},
                          {"test", part(o.test_out, s.test)}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "wrote " << o.learn_out << ": requests " << s.learn.first_request << ".."
            << s.learn.last_request << " (" << s.learn.requests << ", " << s.learn.iterations
            << " iterations)\n"
            << "wrote " << o.test_out << ": requests " << s.test.first_request << ".."
            << s.test.last_request << " (" << s.test.requests << ", " << s.test.iterations
            << " iterations)\n";
  return 0;
}

}  // namespace

Runner AddTraceCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("trace", "record and inspect routing traces");
  cmd->require_subcommand(1);

  auto r = std::make_shared<RecordOptions>();
  CLI::App* record = cmd->add_subcommand("record", "run prompts and record the routing trace");
  AddModelOptions(*record, r->model);
  record
      ->add_option("--prompts", r->prompts,
                   "prompt file (ShareGPT JSON, MT-Bench/GSM8K JSONL, text)")
      ->required();
  record->add_option("--prompt-format", r->format, "auto, sharegpt, mtbench, gsm8k or text");
  record->add_option("--out", r->out, "trace file to write")->required();
  record->add_option("--limit", r->limit, "use only the first N prompts (0 = all)")
      ->check(CLI::Range(0, 1 << 30));
  record->add_option("--max-tokens", r->max_tokens, "tokens to generate per prompt")
      ->check(CLI::Range(0, 1 << 20));
  record
      ->add_option("--max-prompt-tokens", r->max_prompt_tokens,
                   "cut longer prompts (0 = fit the context)")
      ->check(CLI::Range(0, 1 << 24));
  record->add_option("--batch", r->batch, "requests generated together")->check(CLI::Range(1, 256));
  record->add_flag("--chat", r->chat, "wrap each prompt in the model's chat template");
  record->add_option("--temperature", r->temperature, "sampling temperature (0 = greedy)");
  record->add_option("--seed", r->seed, "sampling seed (prompt i uses seed + i)");
  record->add_option("--probs", r->probs, "gate probabilities: f16 (default), bf16, f32 or none");
  record->add_option("--hidden", r->hidden,
                     "gate input hidden states: none (default), bf16 or f32; any but none also "
                     "stores the router weights (next-layer speculation needs both)");
  record->add_flag("--pooled", r->pooled, "store each request's mean input embedding per pass");
  record->add_flag("--json", r->json, "print one JSON object");
  record->add_flag("--force", r->force, "replace an existing --out file that is not a trace");

  auto info_path = std::make_shared<std::string>();
  auto info_json = std::make_shared<bool>(false);
  CLI::App* info = cmd->add_subcommand("info", "summarise a trace");
  info->add_option("trace", *info_path, "trace file")->required();
  info->add_flag("--json", *info_json, "print one JSON object");

  auto im = std::make_shared<trace::ImportOptions>();
  auto im_json = std::make_shared<bool>(false);
  CLI::App* import = cmd->add_subcommand("import", "convert a routing log captured elsewhere");
  import->add_option("--format", im->format, "vllm-jsonl or switch-json")->required();
  import->add_option("--in", im->input, "routing log")->required();
  import->add_option("--metadata", im->metadata, "switch-json: capture metadata (prompt spans)");
  import->add_option("--out", im->output, "trace file to write")->required();
  import->add_option("--iterations", im->iterations,
                     "vllm-jsonl: token (one pass per logged token, default) or pass");
  import
      ->add_option("--warmup-run", im->warmup_run,
                   "vllm-jsonl: drop runs of this many identically routed tokens (0 = keep)")
      ->check(CLI::Range(0, 1 << 30));
  import->add_flag("--json", *im_json, "print one JSON object");
  auto im_force = std::make_shared<bool>(false);
  import->add_flag("--force", *im_force, "replace an existing --out file that is not a trace");

  auto sp = std::make_shared<trace::SplitOptions>();
  auto sp_json = std::make_shared<bool>(false);
  CLI::App* split =
      cmd->add_subcommand("split", "split a trace by request into learning and test parts");
  split->add_option("trace", sp->input, "trace file")->required();
  split->add_option("--learn", sp->learn_out, "trace of the first requests (for --learn-from)")
      ->required();
  split->add_option("--test", sp->test_out, "trace of the remaining requests")->required();
  split
      ->add_option("--fraction", sp->learn_fraction,
                   "share of requests, in the order they began, that go to --learn")
      ->capture_default_str();
  split->add_flag("--json", *sp_json, "print one JSON object");
  auto sp_force = std::make_shared<bool>(false);
  split->add_flag("--force", *sp_force, "replace existing output files that are not traces");

  return [=] {
    if (record->parsed()) return RunRecord(*r);
    if (split->parsed()) return RunSplit(*sp, *sp_json, *sp_force);
    if (import->parsed()) return RunImport(*im, *im_json, *im_force);
    return RunInfo(*info_path, *info_json);
  };
}

}  // namespace moex::cli

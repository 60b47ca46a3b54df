// `moex generate`: text (or token ids) in, generated text out; --json reports timings,
// offload counters and memory as one JSON object (docs/design.md, "Command line").
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/session.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/generator.h"
#include "engine/kv_cache.h"
#include "text/tokenizer_stream.h"

namespace moex::cli {

namespace {

struct GenerateOptions {
  ModelOptions model;
  PromptOptions prompt;
  int max_tokens = 64;
  SamplingOptions sampling;
  int batch = 1;
  bool ignore_eos = false;
  bool json = false;
  bool stats = false;
};

// llama-cli's habit: one line on stderr after the text, speed and (offloaded) the cache.
void PrintStats(const GenerationTimings& t, const Session& session) {
  const nlohmann::json offload = session.executor->MetricsJson();
  const double decode_rate =
      t.decode_ms > 0 ? 1000.0 * static_cast<double>(t.decode_steps) / t.decode_ms : 0.0;
  std::fprintf(stderr, "moex: %lld tokens, decode %.1f tok/s, prefill %lld tokens in %.0f ms",
               static_cast<long long>(t.generated_tokens), decode_rate,
               static_cast<long long>(t.prompt_tokens), t.prefill_ms);
  if (session.options.host_budget.empty()) {
    std::fprintf(stderr, "; every expert resident\n");
  } else {
    std::fprintf(stderr, "; experts offloaded (%s): hit rate %.1f%%, %.1f MB read from the store\n",
                 session.options.policy.c_str(), 100.0 * offload.value("hit_rate", 0.0),
                 offload.value("bytes_read", 0.0) / 1e6);
  }
}

int RunGenerate(const GenerateOptions& o) {
  auto session = OpenSession(o.model);
  const ModelConfig& config = session->model->config;
  GenerationRequest request;
  request.prompt = session->PromptTokens(o.prompt);
  request.max_tokens = o.max_tokens;
  const int64_t context = session->ContextTokens();
  Check(static_cast<int64_t>(request.prompt.size()) + o.max_tokens <= context, "the prompt (",
        request.prompt.size(), " tokens) and --max-tokens (", o.max_tokens,
        ") do not fit the context of ", context, " tokens");
  request.sampling = ResolveSampling(o.sampling, session->model->sampling);
  if (!o.ignore_eos) request.stop_ids = session->StopIds();
  std::vector<GenerationRequest> requests(static_cast<size_t>(o.batch), request);
  for (size_t i = 0; i < requests.size(); ++i) requests[i].sampling.seed = request.sampling.seed + i;

  Generator generator(*session->transformer);
  // Text streams as tokens arrive, holding partial UTF-8 until complete; without a
  // tokenizer the ids themselves stream.
  std::unique_ptr<StreamDecoder> stream;
  if (session->tokenizer) stream = std::make_unique<StreamDecoder>(*session->tokenizer, true);
  // One sequence streams; a batch prints each sequence whole once all are done.
  const bool streaming = !o.json && o.batch == 1;
  // Non-streamed output appears only at the end: show how far generation is (terminal only).
  Progress progress("generated tokens", streaming ? 0 : int64_t{o.max_tokens} * o.batch, true);
  int64_t generated = 0;
  auto results = generator.Generate(requests, [&](size_t index, int32_t token) {
    progress.Update(++generated);
    if (!streaming) return;
    if (stream) {
      std::cout << stream->Push(token) << std::flush;
    } else {
      std::cout << token << " " << std::flush;
    }
  });
  const GenerationTimings& t = generator.timings();
  const GenerationResult& first = results[0];
  session->SavePolicyState();
  auto text_of = [&](const GenerationResult& r) {
    return session->tokenizer ? session->tokenizer->Decode(r.tokens, true) : std::string();
  };
  if (!o.json) {
    if (streaming) {
      if (stream) std::cout << stream->Flush();
      std::cout << "\n" << std::flush;
      if (o.stats) PrintStats(t, *session);
      return 0;
    }
    for (size_t i = 0; i < results.size(); ++i) {
      std::cout << "--- sequence " << i << " (seed " << requests[i].sampling.seed << ") ---\n";
      if (session->tokenizer) {
        std::cout << text_of(results[i]);
      } else {
        for (int32_t token : results[i].tokens) std::cout << token << " ";
      }
      std::cout << "\n" << std::flush;
    }
    if (o.stats) PrintStats(t, *session);
    return 0;
  }

  nlohmann::json out;
  out["model"] = session->model->path;
  out["arch"] = ArchName(config.arch);
  // The first sequence at the top level (the single-sequence contract); all in "sequences".
  out["text"] = text_of(first);
  out["tokens"] = first.tokens;
  out["prompt_tokens"] = request.prompt.size();
  out["finish_reason"] = first.finish_reason;
  out["batch"] = o.batch;
  out["sampling"] = session->model->sampling.ToJson();  // The model's defaults...
  out["sampling"]["used"] = {{"temperature", request.sampling.temperature},  // ...and this run's.
                             {"top_k", request.sampling.top_k},
                             {"top_p", request.sampling.top_p},
                             {"min_p", request.sampling.min_p},
                             {"repetition_penalty", request.sampling.repetition_penalty},
                             {"repeat_last_n", request.sampling.repeat_last_n},
                             {"seed", request.sampling.seed}};
  double ttft = 0;  // Until every sequence has its first token.
  nlohmann::json sequences = nlohmann::json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    ttft = std::max(ttft, results[i].ttft_ms);
    sequences.push_back({{"text", text_of(results[i])},
                         {"tokens", results[i].tokens},
                         {"finish_reason", results[i].finish_reason},
                         {"seed", requests[i].sampling.seed},
                         {"ttft_ms", results[i].ttft_ms}});
  }
  out["sequences"] = sequences;
  const int64_t steps = t.decode_steps;
  const double tpot = steps > 0 ? t.decode_ms / static_cast<double>(steps) : 0.0;
  out["timings"] = {
      {"load_ms", session->load_ms},
      {"prefill_ms", t.prefill_ms},
      {"ttft_ms", ttft},
      {"tpot_ms", tpot},
      {"decode_ms", t.decode_ms},
      {"prefill_tokens_per_s", t.prefill_ms > 0 ? 1000.0 * t.prompt_tokens / t.prefill_ms : 0.0},
      {"decode_tokens_per_s",
       t.decode_ms > 0 ? 1000.0 * (t.generated_tokens - o.batch) / t.decode_ms : 0.0},
  };
  out["offload"] = session->executor->MetricsJson();
  session->AddRoutingReplayJson(out);
  out["memory"] = {{"peak_rss_bytes", PeakRssBytes()},
                   {"host_cache_bytes", session->executor->HostCacheBytes()},
                   {"device_cache_bytes", 0},
                   // Per position over all layers: K and V rows, or MLA's latent + k_pe.
                   {"kv_cache_bytes_per_token", KvCache::BytesPerToken(config)},
                   // Per sequence whatever its length: Gated DeltaNet layers' state.
                   {"recurrent_state_bytes_per_sequence", KvCache::StateBytes(config)},
                   {"kv_cache_kind", config.mla ? "mla_latent" : "kv"}};
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace

Runner AddGenerateCommand(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt");
  AddModelOptions(*cmd, o->model);
  AddPromptOptions(*cmd, o->prompt, true);
  cmd->add_option("-n,--max-tokens,--n-predict", o->max_tokens, "tokens to generate")
      ->check(CLI::Range(0, 1 << 20));
  AddSamplingOptions(*cmd, o->sampling,
                     "random seed; sequence i of a batch uses seed + i (default: random)");
  cmd->add_option("--batch", o->batch, "generate this many sequences together")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--ignore-eos", o->ignore_eos, "do not stop at end-of-sequence tokens");
  cmd->add_flag("--json", o->json, "print one JSON object with text, timings and counters");
  cmd->add_flag("--stats", o->stats,
                "after the text, one line on stderr: speed and, offloaded, the cache's hit rate");
  return [o] { return RunGenerate(*o); };
}

}  // namespace moex::cli

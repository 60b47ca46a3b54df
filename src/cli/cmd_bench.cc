// `moex bench`: prefill and decode throughput on random prompt ids, with the weight bytes a
// decode step streams and the achieved GB/s. Prints one JSON object with --json.
#include <cmath>
#include <iostream>
#include <random>

#include "cli/commands.h"
#include "cli/session.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/read_bandwidth.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "kernels/activation_precision.h"

namespace moex::cli {

namespace {

struct BenchOptions {
  ModelOptions model;
  int prompt_tokens = 128;
  int gen_tokens = 32;
  int batch = 1;
  uint64_t seed = 1;
  bool json = false;
  bool membw = false;
};

// Counts the distinct experts touched per forward pass (summed over MoE layers).
class ExpertCounter : public policy::EventSink {
 public:
  void OnIterationBegin(const policy::IterationBeginEvent&) override { per_forward_.push_back(0); }
  void OnGate(const policy::GateEvent& e) override { per_forward_.back() += e.n_routed; }
  // Total over the last `n` forward passes.
  int64_t LastForwards(int64_t n) const {
    int64_t total = 0;
    for (int64_t i = 0; i < n && i < static_cast<int64_t>(per_forward_.size()); ++i)
      total += per_forward_[per_forward_.size() - 1 - static_cast<size_t>(i)];
    return total;
  }

 private:
  std::vector<int64_t> per_forward_;
};

size_t Bytes(const TensorView* t) { return t ? t->nbytes : 0; }

// Weight bytes every token reads regardless of routing (attention, router, shared and dense
// FFNs, LM head).
size_t DenseBytesPerStep(const Model& m) {
  size_t bytes = Bytes(m.lm_head);
  for (const LayerWeights& L : m.layers) {
    bytes += Bytes(L.q) + Bytes(L.k) + Bytes(L.v) + Bytes(L.o) + Bytes(L.router) +
             Bytes(L.shared_expert_gate);
    // MLA: its projections and the halves of kv_b_proj the absorbed attention reads.
    bytes += Bytes(L.q_a) + Bytes(L.q_b) + Bytes(L.kv_a) + L.mla_k_up.Bytes(m.config.num_heads) +
             L.mla_v_up.Bytes(m.config.num_heads);
    for (const auto* ffn : {&L.shared_expert, &L.dense_ffn})
      if (*ffn) bytes += Bytes((*ffn)->gate) + Bytes((*ffn)->up) + Bytes((*ffn)->down);
  }
  return bytes;
}

int RunBench(const BenchOptions& o) {
  Check(o.prompt_tokens > 0, "--prompt-tokens must be > 0");
  // The run's own context, as llama-bench sizes its own: the model's whole context (Llama 4's
  // is 10M tokens) would size a KV cache that leaves no memory for the experts.
  ModelOptions model_options = o.model;
  model_options.run_tokens = int64_t{o.prompt_tokens} + o.gen_tokens;
  auto session = OpenSession(model_options);
  const Model& model = *session->model;
  ExpertCounter counter;
  session->transformer->AddSink(&counter);

  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  std::uniform_int_distribution<int32_t> pick(0, model.config.vocab_size - 1);
  std::vector<GenerationRequest> requests(static_cast<size_t>(o.batch));
  for (auto& r : requests) {
    for (int i = 0; i < o.prompt_tokens; ++i) r.prompt.push_back(pick(rng));
    r.max_tokens = o.gen_tokens;  // Greedy, no stop tokens: always the full length.
  }
  Generator generator(*session->transformer);
  // One short warm-up so first-touch page faults of the weights are not timed. Not under
  // routing replay: there the timed run must replay the trace's first passes from a cold
  // cache, exactly as `moex sim` does (dense pages then fault in prefill, not in decode).
  if (!session->routing_replay) {
    std::vector<GenerationRequest> warm(1);
    warm[0].prompt = {requests[0].prompt[0]};
    warm[0].max_tokens = 2;
    generator.Generate(warm);
  }
  generator.Generate(requests);
  const GenerationTimings& t = generator.timings();

  // The generator runs all prefill passes first, so the last decode_steps passes are decode.
  const int64_t decode_tokens = t.generated_tokens - o.batch;  // First tokens come from prefill.
  const double decode_tok_s = t.decode_ms > 0 ? 1000.0 * decode_tokens / t.decode_ms : 0.0;
  const double prefill_tok_s = t.prefill_ms > 0 ? 1000.0 * t.prompt_tokens / t.prefill_ms : 0.0;
  const size_t dense = DenseBytesPerStep(model);
  // What the kernels read of one expert, averaged over the MoE layers (a mixed-type model's
  // padding is not read).
  size_t expert_bytes = 0;
  for (const LayerWeights& L : model.layers)
    if (L.is_moe)
      expert_bytes +=
          L.expert_shape.NaturalRecordBytes() * static_cast<size_t>(L.expert_shape.neurons);
  expert_bytes /= static_cast<size_t>(std::max(1, model.NumMoeLayers()));
  const double experts_per_step =
      t.decode_steps > 0 ? static_cast<double>(counter.LastForwards(t.decode_steps)) /
                               static_cast<double>(t.decode_steps)
                         : 0.0;
  const double bytes_per_step = static_cast<double>(dense) + experts_per_step * static_cast<double>(expert_bytes);
  const double steps_per_s = t.decode_ms > 0 ? 1000.0 * t.decode_steps / t.decode_ms : 0.0;
  const double gbps = bytes_per_step * steps_per_s / 1e9;

  nlohmann::json out;
  out["model"] = model.path;
  out["arch"] = ArchName(model.config.arch);
  out["expert_dtype"] = model.ExpertDTypeLabel();
  out["activations"] =
      std::string(kernels::ActivationPrecisionName(kernels::GetActivationPrecision()));
  out["threads"] = ThreadPool::Global().size();
  out["batch"] = o.batch;
  out["prompt_tokens"] = o.prompt_tokens;
  out["gen_tokens"] = o.gen_tokens;
  out["load_ms"] = session->load_ms;
  out["prefill_ms"] = t.prefill_ms;
  out["prefill_tokens_per_s"] = prefill_tok_s;
  out["decode_ms"] = t.decode_ms;
  out["decode_tokens_per_s"] = decode_tok_s;
  out["tpot_ms"] = t.decode_steps > 0 ? t.decode_ms / static_cast<double>(t.decode_steps) : 0.0;
  out["decode_weight_bytes_per_step"] = bytes_per_step;
  out["decode_weight_gb_per_s"] = gbps;
  double membw = 0;
  if (o.membw) {
    // Right after the timed decode, with the same threads: the share is taken side by side.
    const ReadBandwidth bw = MeasureReadBandwidth(size_t{512} << 20, 3);
    membw = bw.wall_gb_per_s;
    out["membw_gb_per_s"] = bw.wall_gb_per_s;
    out["membw_gb_per_s_cpu_time"] = bw.cpu_gb_per_s;
    out["decode_share_of_membw"] = membw > 0 ? gbps / membw : 0.0;
  }
  out["offload"] = session->executor->MetricsJson();
  session->AddRoutingReplayJson(out);
  out["memory"] = {{"peak_rss_bytes", PeakRssBytes()},
                   {"host_cache_bytes", session->executor->HostCacheBytes()}};
  session->SavePolicyState();
  if (o.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "prefill " << prefill_tok_s << " tok/s, decode " << decode_tok_s
              << " tok/s, weights " << gbps << " GB/s";
    if (membw > 0)
      std::cout << " (" << std::lround(100 * gbps / membw) << " % of a " << std::lround(membw)
                << " GB/s streaming read)";
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

Runner AddBenchCommand(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "measure prefill and decode throughput");
  AddModelOptions(*cmd, o->model);
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "prompt length")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gen-tokens", o->gen_tokens, "tokens to decode")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--batch", o->batch, "sequences decoded together")->check(CLI::Range(1, 256));
  cmd->add_option("--seed", o->seed, "seed of the random prompt ids");
  cmd->add_flag("--membw", o->membw,
                "after decoding, measure the streaming-read memory bandwidth and report the "
                "decode's share of it");
  cmd->add_flag("--json", o->json, "print one JSON object");
  return [o] { return RunBench(*o); };
}

}  // namespace moex::cli

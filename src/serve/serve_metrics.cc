#include "serve/serve_metrics.h"

#include <algorithm>
#include <cstdio>

namespace moex::serve {

namespace {

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void Header(std::string& out, const std::string& name, const std::string& help, const char* type) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void Gauge(std::string& out, const std::string& name, const std::string& help, double v) {
  Header(out, name, help, "gauge");
  out += name + " " + Number(v) + "\n";
}

void Counter(std::string& out, const std::string& name, const std::string& help, double v) {
  Header(out, name, help, "counter");
  out += name + " " + Number(v) + "\n";
}

double Field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

void Histogram::Observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Write(const std::string& name, const std::string& help, std::string& out) const {
  Header(out, name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + Number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + Number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

ServeMetrics::ServeMetrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      tpot_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      batch_requests_({1, 2, 4, 8, 16, 32, 64, 128}),
      batch_tokens_({1, 4, 16, 64, 256, 1024, 4096}),
      pass_experts_({8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}),
      decode_pass_experts_(pass_experts_) {}

void ServeMetrics::CountRequest(const std::string& endpoint, int status) {
  MutexLock lock(&mutex_);
  ++requests_[{endpoint, status}];
}

void ServeMetrics::CountTokens(int64_t prompt, int64_t completion) {
  MutexLock lock(&mutex_);
  prompt_tokens_ += static_cast<uint64_t>(prompt);
  completion_tokens_ += static_cast<uint64_t>(completion);
}

void ServeMetrics::ObserveTtft(double seconds) {
  MutexLock lock(&mutex_);
  ttft_.Observe(seconds);
}

void ServeMetrics::ObserveTpot(double seconds) {
  MutexLock lock(&mutex_);
  tpot_.Observe(seconds);
}

void ServeMetrics::ObservePass(int64_t requests, int64_t tokens) {
  MutexLock lock(&mutex_);
  ++passes_;
  batch_requests_.Observe(static_cast<double>(requests));
  batch_tokens_.Observe(static_cast<double>(tokens));
}

void ServeMetrics::ObserveActivatedExperts(int64_t experts, bool decode_only) {
  MutexLock lock(&mutex_);
  pass_experts_.Observe(static_cast<double>(experts));
  if (decode_only) decode_pass_experts_.Observe(static_cast<double>(experts));
}

void ServeMetrics::CountUnit(bool regrouped) {
  MutexLock lock(&mutex_);
  ++units_;
  units_regrouped_ += regrouped ? 1 : 0;
}

void ServeMetrics::CountDeferredPrefill() {
  MutexLock lock(&mutex_);
  ++deferred_prefills_;
}

void ServeMetrics::SetPrefixCache(const PrefixCacheStats& stats, int64_t budget_bytes) {
  MutexLock lock(&mutex_);
  prefix_ = stats;
  prefix_budget_ = budget_bytes;
}

std::string ServeMetrics::Render(int queued, int running, const nlohmann::json& offload) const {
  std::string out;
  {
    MutexLock lock(&mutex_);
    Header(out, "moex_requests_total", "HTTP API requests by endpoint and status code", "counter");
    for (const auto& [key, n] : requests_)
      out += "moex_requests_total{endpoint=\"" + key.first + "\",status=\"" +
             std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
    Counter(out, "moex_prompt_tokens_total", "prompt tokens of finished requests",
            static_cast<double>(prompt_tokens_));
    Counter(out, "moex_completion_tokens_total", "tokens generated for finished requests",
            static_cast<double>(completion_tokens_));
    Counter(out, "moex_forward_passes_total", "forward passes run by the scheduler",
            static_cast<double>(passes_));
    ttft_.Write("moex_time_to_first_token_seconds", "arrival to first generated token", out);
    tpot_.Write("moex_time_per_output_token_seconds",
                "mean time between generated tokens, per request", out);
    batch_requests_.Write("moex_batch_requests", "requests in one forward pass", out);
    batch_tokens_.Write("moex_batch_tokens", "tokens in one forward pass", out);
    pass_experts_.Write("moex_pass_activated_experts",
                        "distinct experts one forward pass routed to, summed over MoE layers", out);
    decode_pass_experts_.Write("moex_decode_pass_activated_experts",
                               "moex_pass_activated_experts of passes where every request decodes",
                               out);
    Counter(out, "moex_regroup_units_total", "regrouping units started (--regroup N >= 2)",
            static_cast<double>(units_));
    Counter(out, "moex_regroup_units_regrouped_total",
            "regrouping units whose split the policy changed",
            static_cast<double>(units_regrouped_));
    Counter(out, "moex_prefill_deferred_total",
            "prefill chunks held back a pass to keep the running requests' TPOT (--tpot-target)",
            static_cast<double>(deferred_prefills_));
    Counter(out, "moex_prefix_cache_lookups_total", "requests that looked up the prefix cache",
            static_cast<double>(prefix_.lookups));
    Counter(out, "moex_prefix_cache_hits_total", "requests that reused a cached prefix",
            static_cast<double>(prefix_.hits));
    Counter(out, "moex_prefix_cache_tokens_total",
            "prompt tokens whose KV rows came from the prefix cache (prefill saved)",
            static_cast<double>(prefix_.tokens_reused));
    Counter(out, "moex_prefix_cache_evicted_blocks_total", "blocks evicted to keep the budget",
            static_cast<double>(prefix_.evicted));
    Gauge(out, "moex_prefix_cache_blocks", "token blocks held by the prefix cache",
          static_cast<double>(prefix_.blocks));
    Gauge(out, "moex_prefix_cache_bytes", "KV bytes held by the prefix cache",
          static_cast<double>(prefix_.bytes));
    Gauge(out, "moex_prefix_cache_budget_bytes", "prefix cache budget (0: off)",
          static_cast<double>(prefix_budget_));
  }
  Gauge(out, "moex_preparing_requests",
        "requests whose prompt is being rendered and tokenized (before the queue)",
        preparing_.load());
  Gauge(out, "moex_queue_length", "requests waiting for a slot", queued);
  Gauge(out, "moex_running_requests", "requests holding a KV cache", running);
  struct Series {
    const char* key;
    const char* name;
    const char* help;
    double scale;
    const char* type;
  };
  // Expert parallelism (src/dist): per rank, what it holds, its own store's hits, misses,
  // reads and waits, and, for the workers, the traffic with rank 0, the time rank 0 waited on
  // the network and the time the rank computed.
  if (offload.is_object() && offload.contains("expert_parallel")) {
    static const Series kRankSeries[] = {
        {"experts", "moex_rank_experts", "routed experts the rank holds", 1, "gauge"},
        {"expert_bytes", "moex_rank_expert_bytes", "expert bytes the rank holds in memory", 1,
         "gauge"},
        {"peak_rss_bytes", "moex_rank_peak_rss_bytes", "the rank's peak resident set", 1, "gauge"},
        {"bytes_sent", "moex_rank_network_sent_bytes_total", "bytes rank 0 sent to the rank", 1,
         "counter"},
        {"bytes_received", "moex_rank_network_received_bytes_total",
         "bytes rank 0 received from the rank", 1, "counter"},
        {"wait_ms", "moex_rank_network_wait_seconds_total",
         "time rank 0 waited for the rank's answers after its own experts", 1e-3, "counter"},
        {"compute_ms", "moex_rank_compute_seconds_total", "time the rank computed experts", 1e-3,
         "counter"},
        {"hits", "moex_rank_store_hits_total", "routed experts in the rank's own cache", 1,
         "counter"},
        {"misses", "moex_rank_store_misses_total", "routed experts the rank read from its store", 1,
         "counter"},
        {"store_bytes_read", "moex_rank_store_read_bytes_total",
         "bytes the rank read from its own expert store", 1, "counter"},
        {"store_wait_ms", "moex_rank_store_wait_seconds_total",
         "time the rank's experts waited for its store", 1e-3, "counter"},
    };
    for (const Series& s : kRankSeries) {
      Header(out, s.name, s.help, s.type);
      for (const nlohmann::json& rank : offload["expert_parallel"]["per_rank"])
        if (rank.contains(s.key))
          out += std::string(s.name) + "{rank=\"" + Number(Field(rank, "rank")) + "\"} " +
                 Number(Field(rank, s.key) * s.scale) + "\n";
    }
  }
  if (!offload.is_object() || !offload.contains("layers")) return out;

  static const Series kLayerSeries[] = {
      {"hits", "moex_offload_hits_total", "expert accesses served from the cache", 1, "counter"},
      {"misses", "moex_offload_misses_total", "expert accesses that had to be read", 1, "counter"},
      {"prefetch_issued", "moex_offload_prefetch_issued_total", "prefetches issued", 1, "counter"},
      {"prefetch_used", "moex_offload_prefetch_used_total", "prefetches used before eviction", 1,
       "counter"},
      {"prefetch_wasted", "moex_offload_prefetch_wasted_total", "prefetches evicted without use", 1,
       "counter"},
      {"bytes_read", "moex_offload_read_bytes_total", "bytes read from the expert store", 1,
       "counter"},
      {"stall_ms", "moex_offload_stall_seconds_total", "time the compute waited for experts", 1e-3,
       "counter"},
  };
  for (const Series& s : kLayerSeries) {
    Header(out, s.name, s.help, s.type);
    for (const nlohmann::json& layer : offload["layers"])
      out += std::string(s.name) + "{layer=\"" + Number(Field(layer, "layer")) + "\"} " +
             Number(Field(layer, s.key) * s.scale) + "\n";
  }
  Gauge(out, "moex_offload_resident_bytes", "expert bytes held in the host cache",
        Field(offload, "host_cache_bytes"));
  Gauge(out, "moex_offload_budget_bytes", "host cache budget", Field(offload, "budget_bytes"));
  Gauge(out, "moex_offload_hit_rate", "demand hits / demand accesses since start",
        Field(offload, "hit_rate"));
  return out;
}

}  // namespace moex::serve

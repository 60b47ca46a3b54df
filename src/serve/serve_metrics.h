// What the server measures, exported at GET /metrics in Prometheus' text format: requests by
// endpoint and status, tokens in and out, TTFT / TPOT / batch-size histograms, the queue and
// the running requests, and the offload counters per MoE layer.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mutex.h"
#include "engine/prefix_cache.h"

namespace moex::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void Observe(double value);
  // Lines of a Prometheus histogram named `name` (with _bucket, _sum, _count).
  void Write(const std::string& name, const std::string& help, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // Non-cumulative; the last is +Inf.
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServeMetrics {
 public:
  ServeMetrics();
  void CountRequest(const std::string& endpoint, int status);
  void CountTokens(int64_t prompt, int64_t completion);
  void ObserveTtft(double seconds);
  void ObserveTpot(double seconds);
  void ObservePass(int64_t requests, int64_t tokens);
  // Experts one pass activated, summed over its MoE layers (ExpertFlow's Eq. 5 term);
  // `decode_only`: every request of the pass decoded one token.
  void ObserveActivatedExperts(int64_t experts, bool decode_only);
  // A regrouping unit started; `regrouped`: the policy changed its split.
  void CountUnit(bool regrouped);
  // A prefill chunk waited for a later pass (SchedulerOptions::tpot_target_ms).
  void CountDeferredPrefill();
  // The prefix cache's counters now (the scheduler publishes them when they change).
  void SetPrefixCache(const PrefixCacheStats& stats, int64_t budget_bytes);

  // Counts a request while its body is parsed and its prompt rendered and tokenized (on an
  // HTTP thread, before the scheduler sees it), for moex_preparing_requests.
  class Preparing {
   public:
    explicit Preparing(ServeMetrics& m) : m_(m) { ++m_.preparing_; }
    ~Preparing() { --m_.preparing_; }
    Preparing(const Preparing&) = delete;
    Preparing& operator=(const Preparing&) = delete;

   private:
    ServeMetrics& m_;
  };

  // The whole exposition; `offload` is MoeExecutor::MetricsJson (null when resident).
  std::string Render(int queued, int running, const nlohmann::json& offload) const;

 private:
  std::atomic<int> preparing_{0};
  mutable Mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_ GUARDED_BY(mutex_);
  uint64_t prompt_tokens_ GUARDED_BY(mutex_) = 0;
  uint64_t completion_tokens_ GUARDED_BY(mutex_) = 0;
  uint64_t passes_ GUARDED_BY(mutex_) = 0;
  uint64_t units_ GUARDED_BY(mutex_) = 0;
  uint64_t units_regrouped_ GUARDED_BY(mutex_) = 0;
  uint64_t deferred_prefills_ GUARDED_BY(mutex_) = 0;
  PrefixCacheStats prefix_ GUARDED_BY(mutex_);
  int64_t prefix_budget_ GUARDED_BY(mutex_) = 0;
  Histogram ttft_ GUARDED_BY(mutex_), tpot_ GUARDED_BY(mutex_);
  Histogram batch_requests_ GUARDED_BY(mutex_), batch_tokens_ GUARDED_BY(mutex_);
  Histogram pass_experts_ GUARDED_BY(mutex_), decode_pass_experts_ GUARDED_BY(mutex_);
};

}  // namespace moex::serve

// Continuous batching (iteration-level scheduling, as in Orca): one thread owns the engine
// and runs forward passes back to back; between passes, finished, cancelled and timed-out
// requests leave and queued ones join (first come, first served, bounded queue). Each pass
// holds every decoding request's next token and prefill chunks of the others, up to a token
// budget. A prompt is prefilled in chunks of exactly --prefill-chunk tokens at fixed
// offsets, whatever else runs, so a long prompt cannot stall the decodes for long and a
// greedy request's tokens do not depend on its neighbours (the kernels are batch-invariant).
// One transformer, one expert cache and one policy serve every request.
//
// With `regroup` N >= 2 (ExpertFlow's dual-batch unit at N = 2, §3.3 and §4), the scheduler
// works in units of N passes: when a unit starts, the running requests are split into N
// groups of equal size (in admission order) and offered with the tokens they would run to
// the engine's policy (set_regrouper), which may regroup them so each pass
// activates fewer experts; the unit then runs one pass per group, so every request advances
// once per unit. Requests admitted during a unit join the next one. A request's KV cache is
// its own (KvCache per Sequence, addressed through BatchItem), so the paper's KV Merge and
// Reindex are nothing to do here: moving a request to another pass moves its pointer.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/mutex.h"
#include "engine/logprobs.h"
#include "engine/prefix_cache.h"
#include "engine/sampler.h"
#include "engine/transformer.h"
#include "serve/pass_pacer.h"
#include "serve/serve_metrics.h"
#include "text/grammar.h"
#include "text/grammar_matcher.h"
#include "text/tokenizer.h"

namespace moex::serve {

struct SchedulerOptions {
  int max_running = 16;            // Requests holding a KV cache at once.
  int max_queue = 64;              // Requests waiting for a slot; more are refused (429).
  int64_t max_batch_tokens = 512;  // Tokens in one forward pass.
  int64_t prefill_chunk = 256;     // Prompt tokens of one request in one pass.
  double timeout_s = 600;          // Per request, from arrival; 0 = none.
  int regroup = 1;                 // Passes per regrouping unit; 0 or 1: no units.
  // Prefix caching (engine/prefix_cache.h): bytes of KV rows kept for later requests that
  // start with the same tokens (0: off), in blocks of this many tokens.
  int64_t prefix_cache_bytes = int64_t{1} << 30;
  int64_t prefix_block_tokens = 1;
  // TPOT as a priority (serve/pass_pacer.h): prefill chunks wait while they would push the
  // running requests' mean time per output token above this many ms; 0: off.
  double tpot_target_ms = 0;
};

class JobHandle;

// What the scheduler runs for one request.
struct Job {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;        // Generation ends after one of these (not returned).
  std::vector<std::string> stop_texts;  // OpenAI `stop`.
  // Structured output: every token is drawn from those the grammar allows next, and a stop
  // id only where the grammar may end (null: free text). Needs the tokenizer.
  std::shared_ptr<const Grammar> grammar;
  // The reply's text keeps the text of special tokens (harmony's channel markers, which the
  // server parses); otherwise they are left out.
  bool special_text = false;
  // Log probabilities of each generated token (not of stop ids) and of this many likely
  // alternatives; -1: none (engine/logprobs.h).
  int logprobs = -1;
  // Admitted only once this request has started (JobHandle::started): SubmitChoices.
  std::shared_ptr<const JobHandle> after;
};

// Shared by the scheduler, which fills it, and the HTTP thread, which drains it.
class JobHandle {
 public:
  struct Update {
    std::string text;             // New text (may be empty).
    std::vector<int32_t> tokens;  // New token ids.
    std::vector<TokenLogprobs> logprobs;  // With Job::logprobs >= 0: of the new tokens.
    bool finished = false;
    std::string finish_reason;  // stop, length, cancelled, timeout, shutdown, error.
    std::string error;          // With finish_reason "error".
  };

  // Waits until there is news or `timeout` passes; returns everything new since the last call.
  Update Wait(std::chrono::milliseconds timeout) EXCLUDES(mutex_);
  // Asks the scheduler to drop the request (client gone); safe to call at any time.
  void Cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  // Whether it has a token or has finished (then its prompt is in the prefix cache).
  bool started() const EXCLUDES(mutex_);

  int64_t prompt_tokens() const { return prompt_tokens_; }
  // Prompt tokens whose KV rows came from the prefix cache (set before the first token).
  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t completion_tokens() const EXCLUDES(mutex_);
  Clock::time_point arrival() const { return arrival_; }
  // Arrival to the first generated token; -1 before it.
  double ttft_ms() const EXCLUDES(mutex_);

 private:
  friend class Scheduler;
  void Append(const std::string& text, int32_t token, TokenLogprobs* logprobs = nullptr)
      EXCLUDES(mutex_);
  void Finish(const std::string& reason, const std::string& error = "") EXCLUDES(mutex_);

  mutable Mutex mutex_;
  CondVar cv_;
  std::string text_ GUARDED_BY(mutex_);
  std::vector<int32_t> tokens_ GUARDED_BY(mutex_);
  std::vector<TokenLogprobs> logprobs_ GUARDED_BY(mutex_);
  int64_t completion_tokens_ GUARDED_BY(mutex_) = 0;
  Clock::time_point first_token_ GUARDED_BY(mutex_);
  bool finished_ GUARDED_BY(mutex_) = false;
  bool finish_reported_ GUARDED_BY(mutex_) = false;
  std::string finish_reason_ GUARDED_BY(mutex_), error_ GUARDED_BY(mutex_);
  std::atomic<bool> cancelled_{false};
  int64_t prompt_tokens_ = 0;
  std::atomic<int64_t> cached_tokens_{0};
  Clock::time_point arrival_ = Clock::now();
};

class Scheduler {
 public:
  // `tokenizer` may be null (token ids only, no text).
  Scheduler(Transformer& transformer, const Tokenizer* tokenizer, SchedulerOptions options,
            ServeMetrics* metrics = nullptr);
  ~Scheduler();

  // Queues a job; throws ApiError 429 when the queue is full, 503 when draining.
  std::shared_ptr<JobHandle> Submit(Job job) EXCLUDES(mutex_);
  // Queues `n` choices of one job (OpenAI's `n`), all or none: choice i samples with seed
  // job.sampling.seed + i. With the prefix cache on, choices 1..n-1 wait until choice 0 has
  // its first token, so they find its prompt rows in the cache and compute only the last
  // prompt token each: the prompt is prefilled once.
  std::vector<std::shared_ptr<JobHandle>> SubmitChoices(Job job, int n) EXCLUDES(mutex_);
  // Who splits each regrouping unit (options.regroup >= 2): the engine's policy
  // (MoeExecutor::regrouper); null keeps the admission-order split. Asked on the scheduler
  // thread, between passes. REQUIRES: `regrouper` outlives the scheduler.
  void set_regrouper(policy::PassRegrouper* regrouper) EXCLUDES(mutex_);

  // Stops admitting new requests, lets every queued and running one finish, then stops the
  // thread. With `timeout_s` >= 0, what is still queued or running that long after the call
  // ends with finish reason "shutdown" after the pass in flight (the server answers 503).
  // Idempotent; a later call can only bring the deadline closer.
  void Drain(double timeout_s = -1) EXCLUDES(mutex_);
  // What `source` says about the engine (offload counters, the cache's contents), taken
  // on the scheduler thread between passes, at most every 250 ms: the engine is never read
  // while a pass runs. Null until a source is set.
  nlohmann::json EngineSnapshot() const EXCLUDES(snapshot_mutex_);
  void set_snapshot_source(std::function<nlohmann::json()> source) EXCLUDES(snapshot_mutex_);

  int queued() const EXCLUDES(mutex_);
  int running() const;

 private:
  // A request ready to run in the next pass.
  struct Candidate {
    int64_t request = -1;   // Event-stream request id.
    bool decoding = false;  // Else prefilling.
    int64_t tokens = 0;     // Tokens it would put in the pass.
    int64_t position = 0;   // Tokens already in its KV cache.
  };

  struct Sequence;
  void Loop();
  void Admit();
  // Ends every queued and running request with "shutdown" (the drain's deadline passed).
  void AbortAll();
  bool RunPass();  // False when no candidate fitted the pass (the pacer held prefills back).
  int groups() const { return std::max(1, options_.regroup); }
  // Prompt tokens `s` prefills in its next pass: up to the next multiple of --prefill-chunk,
  // so chunks stay at the same offsets whatever prefix the cache supplied.
  int64_t NextChunk(const Sequence& s) const;
  // Offers the rows `s` has computed to the prefix cache.
  void StorePrefix(const Sequence& s);
  // Masks `row` (into masked_) to what s's grammar allows next; false when nothing is.
  bool MaskToGrammar(Sequence& s, std::span<const float> row);
  // Splits the running requests into the groups of the next unit (regroup >= 2).
  void FormUnit();
  void Emit(Sequence& s, int32_t token, TokenLogprobs* logprobs = nullptr);
  void Retire(Sequence& s, const std::string& reason, const std::string& error = "");
  void RefreshSnapshot(bool force) EXCLUDES(snapshot_mutex_);

  Transformer& transformer_;
  const Tokenizer* tokenizer_;
  SchedulerOptions options_;
  ServeMetrics* metrics_;
  std::unique_ptr<PrefixCache> prefix_cache_;  // Scheduler thread only; null when off.
  PassPacer pacer_;                            // Scheduler thread only.
  // KV caches of retired requests, kept for the next ones (running and spare caches are at
  // most max_running together): a fresh cache's pages cost more to fault in and clear than
  // a short prefill (docs/serving.md).
  std::vector<std::unique_ptr<KvCache>> spare_caches_;
  std::unique_ptr<KvCache> TakeCache(int64_t capacity);
  void GiveBackCache(std::unique_ptr<KvCache> cache);
  // Drops the retired requests from running_, keeping their caches.
  void SweepRetired();
  // The vocabulary's token trie, built for the first request with a grammar; scratch.
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<uint64_t> mask_words_;
  std::vector<float> masked_, adjusted_;

  mutable Mutex mutex_;
  CondVar cv_;
  std::deque<std::pair<Job, std::shared_ptr<JobHandle>>> queue_ GUARDED_BY(mutex_);
  bool draining_ GUARDED_BY(mutex_) = false;
  Clock::time_point drain_deadline_ GUARDED_BY(mutex_) = Clock::time_point::max();
  std::atomic<int> running_count_{0};
  policy::PassRegrouper* regrouper_ GUARDED_BY(mutex_) = nullptr;

  std::vector<std::unique_ptr<Sequence>> running_;  // Scheduler thread only.
  // The current unit: the requests of each of its passes, and the next pass to run.
  std::vector<std::vector<int64_t>> unit_;
  size_t unit_pass_ = 0;
  bool regroup_warned_ = false;

  mutable Mutex snapshot_mutex_;
  nlohmann::json snapshot_ GUARDED_BY(snapshot_mutex_);
  std::function<nlohmann::json()> snapshot_source_ GUARDED_BY(snapshot_mutex_);
  Clock::time_point snapshot_time_ GUARDED_BY(snapshot_mutex_){};

  std::thread thread_;
};

}  // namespace moex::serve

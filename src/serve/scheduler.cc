#include "serve/scheduler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/logging.h"
#include "engine/kv_cache.h"
#include "policy/common/token_regrouping.h"
#include "text/tokenizer_stream.h"
#include "serve/api_error.h"
#include "serve/stop_text.h"

namespace moex::serve {

// --- JobHandle ---

JobHandle::Update JobHandle::Wait(std::chrono::milliseconds timeout) {
  MutexLock lock(&mutex_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (text_.empty() && tokens_.empty() && !(finished_ && !finish_reported_))
    if (!cv_.WaitUntil(lock, deadline)) break;
  Update u;
  u.text.swap(text_);
  u.tokens.swap(tokens_);
  u.logprobs.swap(logprobs_);
  if (finished_ && !finish_reported_) {
    finish_reported_ = true;
    u.finished = true;
    u.finish_reason = finish_reason_;
    u.error = error_;
  }
  return u;
}

bool JobHandle::started() const {
  MutexLock lock(&mutex_);
  return completion_tokens_ > 0 || finished_;
}

int64_t JobHandle::completion_tokens() const {
  MutexLock lock(&mutex_);
  return completion_tokens_;
}

double JobHandle::ttft_ms() const {
  MutexLock lock(&mutex_);
  return completion_tokens_ > 0
             ? std::chrono::duration<double, std::milli>(first_token_ - arrival_).count()
             : -1.0;
}

void JobHandle::Append(const std::string& text, int32_t token, TokenLogprobs* logprobs) {
  {
    MutexLock lock(&mutex_);
    text_ += text;
    if (logprobs) logprobs_.push_back(std::move(*logprobs));
    if (token >= 0) {
      tokens_.push_back(token);
      if (completion_tokens_++ == 0) first_token_ = Clock::now();
    }
  }
  cv_.NotifyAll();
}

void JobHandle::Finish(const std::string& reason, const std::string& error) {
  {
    MutexLock lock(&mutex_);
    if (finished_) return;
    finished_ = true;
    finish_reason_ = reason;
    error_ = error;
  }
  cv_.NotifyAll();
}

// --- Scheduler ---

// A request holding a KV cache.
struct Scheduler::Sequence {
  Job job;
  std::shared_ptr<JobHandle> handle;
  int64_t id = -1;  // Event-stream request id.
  std::unique_ptr<KvCache> cache;
  Sampler sampler;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<GrammarMatcher> matcher;  // With job.grammar.
  StopText stop_text;
  std::vector<int32_t> history;  // The prompt, then every emitted token.
  size_t prefilled = 0;          // Prompt tokens in the cache.
  int32_t next = -1;             // Sampled, not yet fed back (decoding).
  int generated = 0;
  bool done = false;
  Clock::time_point deadline = Clock::time_point::max();
  Clock::time_point first_token{};

  Sequence(Job j, std::shared_ptr<JobHandle> h)
      : job(std::move(j)),
        handle(std::move(h)),
        sampler(job.sampling),
        stop_text(job.stop_texts),
        history(job.prompt) {}
  bool decoding() const { return prefilled == job.prompt.size(); }
};

Scheduler::Scheduler(Transformer& transformer, const Tokenizer* tokenizer, SchedulerOptions options,
                     ServeMetrics* metrics)
    : transformer_(transformer),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      pacer_(std::max(0.0, options.tpot_target_ms)) {
  Check(options_.max_running >= 1, "--max-running must be at least 1");
  Check(options_.tpot_target_ms >= 0 && std::isfinite(options_.tpot_target_ms),
        "--tpot-target must be a number of milliseconds >= 0");
  Check(options_.max_queue >= 0, "--max-queue must be at least 0");
  Check(options_.prefill_chunk >= 1, "--prefill-chunk must be at least 1");
  Check(options_.regroup >= 0, "--regroup must be at least 0");
  // With units of N passes, a pass holds one group: about max_running / N decodes.
  const int64_t per_pass = (options_.max_running + groups() - 1) / groups();
  Check(options_.max_batch_tokens >= per_pass, "--max-batch-tokens (", options_.max_batch_tokens,
        ") must be at least --max-running (", options_.max_running, ")",
        groups() > 1 ? " / --regroup (" + std::to_string(groups()) + ")" : std::string(),
        ": every running request's next token must fit its pass");
  Check(options_.max_batch_tokens >= options_.prefill_chunk, "--max-batch-tokens (",
        options_.max_batch_tokens, ") must be at least --prefill-chunk (", options_.prefill_chunk,
        ")");
  Check(options_.prefix_cache_bytes >= 0, "--prefix-cache must not be negative");
  Check(options_.prefix_block_tokens >= 1, "--prefix-cache-block must be at least 1");
  // Replayed routing follows a recorded trace token by token: skipping a cached prefix
  // would shift it, so replays compute every prompt.
  if (options_.prefix_cache_bytes > 0 && !transformer_.replays_routing())
    prefix_cache_ = std::make_unique<PrefixCache>(
        transformer_.model().config, options_.prefix_cache_bytes, options_.prefix_block_tokens);
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() {
  Drain();
}

std::shared_ptr<JobHandle> Scheduler::Submit(Job job) { return SubmitChoices(std::move(job), 1)[0]; }

std::vector<std::shared_ptr<JobHandle>> Scheduler::SubmitChoices(Job job, int n) {
  if (n < 1) throw ApiError(400, "'n' must be at least 1", "n");
  const int64_t context = transformer_.model().config.max_position_embeddings;
  if (job.prompt.empty()) throw ApiError(400, "the prompt encodes to no tokens", "prompt");
  if (static_cast<int64_t>(job.prompt.size()) + job.max_tokens > context)
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(context) +
                       " tokens. However, you requested " +
                       std::to_string(job.prompt.size() + job.max_tokens) + " tokens (" +
                       std::to_string(job.prompt.size()) + " in the prompt, " +
                       std::to_string(job.max_tokens) +
                       " for the completion). Please reduce the prompt or max_tokens.",
                   "messages", "context_length_exceeded");
  const int32_t vocab = static_cast<int32_t>(transformer_.model().config.vocab_size);
  for (int32_t id : job.prompt)
    if (id < 0 || id >= vocab)
      throw ApiError(400, "prompt token id " + std::to_string(id) + " is outside the vocabulary",
                     "prompt");
  std::vector<std::shared_ptr<JobHandle>> handles;
  for (int i = 0; i < n; ++i) {
    handles.push_back(std::make_shared<JobHandle>());
    handles.back()->prompt_tokens_ = static_cast<int64_t>(job.prompt.size());
  }
  {
    MutexLock lock(&mutex_);
    if (draining_) throw ApiError(503, "the server is shutting down", "", "", "server_error");
    // Requests beyond the free slots wait in the queue, at most max_queue of them.
    const int free_slots = std::max(0, options_.max_running - running_count_.load());
    if (static_cast<int>(queue_.size()) + n > options_.max_queue + free_slots)
      throw ApiError(429, "the request queue is full (" + std::to_string(options_.max_queue) +
                              " waiting); retry later");
    for (int i = 0; i < n; ++i) {
      Job choice = i + 1 < n ? job : std::move(job);
      choice.sampling.seed += static_cast<uint64_t>(i);
      if (i > 0 && prefix_cache_) choice.after = handles[0];
      queue_.emplace_back(std::move(choice), handles[static_cast<size_t>(i)]);
    }
  }
  cv_.NotifyAll();
  return handles;
}

void Scheduler::set_regrouper(policy::PassRegrouper* regrouper) {
  MutexLock lock(&mutex_);
  regrouper_ = regrouper;
}

void Scheduler::Drain(double timeout_s) {
  {
    MutexLock lock(&mutex_);
    draining_ = true;
    if (timeout_s >= 0)
      drain_deadline_ = std::min(drain_deadline_,
                                 Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(timeout_s)));
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

int Scheduler::queued() const {
  MutexLock lock(&mutex_);
  return static_cast<int>(queue_.size());
}

int Scheduler::running() const {
  return running_count_;
}

void Scheduler::set_snapshot_source(std::function<nlohmann::json()> source) {
  MutexLock lock(&snapshot_mutex_);
  snapshot_source_ = std::move(source);
  if (snapshot_source_) snapshot_ = snapshot_source_();
}

nlohmann::json Scheduler::EngineSnapshot() const {
  MutexLock lock(&snapshot_mutex_);
  return snapshot_;
}

void Scheduler::RefreshSnapshot(bool force) {
  MutexLock lock(&snapshot_mutex_);
  if (!snapshot_source_) return;
  const auto now = Clock::now();
  if (!force && now - snapshot_time_ < std::chrono::milliseconds(250)) return;
  snapshot_ = snapshot_source_();
  snapshot_time_ = now;
}

void Scheduler::AbortAll() {
  static const char* kWhy = "the server shut down before the request finished (--drain-timeout)";
  std::deque<std::pair<Job, std::shared_ptr<JobHandle>>> queued;
  {
    MutexLock lock(&mutex_);
    queued.swap(queue_);
  }
  for (auto& item : queued) item.second->Finish("shutdown", kWhy);
  for (auto& s : running_) Retire(*s, "shutdown", kWhy);
  SweepRetired();
  running_count_ = static_cast<int>(running_.size());
}

void Scheduler::Loop() {
  for (;;) {
    bool abort = false;
    {
      MutexLock lock(&mutex_);
      while (queue_.empty() && running_.empty() && !draining_) cv_.Wait(lock);
      if (draining_ && queue_.empty() && running_.empty()) break;
      abort = draining_ && Clock::now() >= drain_deadline_;
    }
    if (abort) {
      AbortAll();
      continue;
    }
    Admit();
    if (!running_.empty() && !RunPass()) {
      // The pacer held every request back: wait a little rather than spin.
      MutexLock lock(&mutex_);
      cv_.WaitUntil(lock, std::chrono::steady_clock::now() + std::chrono::milliseconds(1));
    }
    RefreshSnapshot(running_.empty());
  }
  RefreshSnapshot(true);
}

void Scheduler::Admit() {
  for (;;) {
    std::pair<Job, std::shared_ptr<JobHandle>> item;
    {
      MutexLock lock(&mutex_);
      if (static_cast<int>(running_.size()) >= options_.max_running) return;
      // The first request that may start: a later choice of `n` waits for the first.
      const auto ready = std::find_if(queue_.begin(), queue_.end(), [](const auto& entry) {
        return !entry.first.after || entry.first.after->started() || entry.second->cancelled();
      });
      if (ready == queue_.end()) return;
      item = std::move(*ready);
      queue_.erase(ready);
    }
    auto& [job, handle] = item;
    if (handle->cancelled()) {
      handle->Finish("cancelled");
      continue;
    }
    auto s = std::make_unique<Sequence>(std::move(job), std::move(handle));
    if (options_.timeout_s > 0)
      s->deadline = s->handle->arrival() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(options_.timeout_s));
    try {
      s->cache = TakeCache(static_cast<int64_t>(s->job.prompt.size()) + s->job.max_tokens);
    } catch (const std::bad_alloc&) {
      s->handle->Finish("error", "out of memory for the request's KV cache");
      continue;
    }
    if (prefix_cache_) {
      // At most all but the last prompt token: its logits start the reply.
      const int64_t prompt = static_cast<int64_t>(s->job.prompt.size());
      const int64_t reused = prefix_cache_->Restore(
          s->job.prompt, prompt - 1, transformer_.RotatesLong(prompt), s->cache.get());
      s->prefilled = static_cast<size_t>(reused);
      s->handle->cached_tokens_ = reused;
      if (metrics_) metrics_->SetPrefixCache(prefix_cache_->stats(), prefix_cache_->budget_bytes());
    }
    if (tokenizer_) s->decoder = std::make_unique<StreamDecoder>(*tokenizer_, !s->job.special_text);
    if (s->job.grammar && tokenizer_) {
      if (!trie_) {
        // Once per server: the vocabulary's bytes (control tokens are never grammar text).
        std::vector<std::string> bytes;
        std::vector<bool> special;
        for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
          bytes.push_back(tokenizer_->TokenBytes(id));
          special.push_back(tokenizer_->IsSpecial(id));
        }
        trie_ = std::make_shared<const TokenTrie>(std::move(bytes), std::move(special));
      }
      s->matcher = std::make_unique<GrammarMatcher>(s->job.grammar, trie_);
    }
    s->id = transformer_.BeginRequest(s->job.prompt);
    running_.push_back(std::move(s));
    running_count_ = static_cast<int>(running_.size());
  }
}

bool Scheduler::MaskToGrammar(Sequence& s, std::span<const float> row) {
  s.matcher->FillMask(&mask_words_);
  masked_.assign(row.size(), -std::numeric_limits<float>::infinity());
  bool any = false;
  const size_t in_trie = std::min(row.size(), static_cast<size_t>(trie_->vocab_size()));
  for (size_t w = 0; w < mask_words_.size(); ++w) {
    for (uint64_t bits = mask_words_[w]; bits != 0; bits &= bits - 1) {
      const size_t t = w * 64 + static_cast<size_t>(std::countr_zero(bits));
      if (t >= in_trie) break;
      masked_[t] = row[t];
      any = true;
    }
  }
  // End of sequence only where the grammar may end.
  if (s.matcher->IsComplete())
    for (int32_t id : s.job.stop_ids)
      if (id >= 0 && static_cast<size_t>(id) < row.size()) {
        masked_[static_cast<size_t>(id)] = row[static_cast<size_t>(id)];
        any = true;
      }
  return any;
}

void Scheduler::SweepRetired() {
  for (auto& s : running_)
    if (s->done) GiveBackCache(std::move(s->cache));
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const std::unique_ptr<Sequence>& s) { return s->done; }),
                 running_.end());
}

std::unique_ptr<KvCache> Scheduler::TakeCache(int64_t capacity) {
  // The smallest spare that fits.
  auto best = spare_caches_.end();
  for (auto it = spare_caches_.begin(); it != spare_caches_.end(); ++it)
    if ((*it)->capacity() >= capacity &&
        (best == spare_caches_.end() || (*it)->capacity() < (*best)->capacity()))
      best = it;
  if (best == spare_caches_.end()) {
    // None fits: one spare goes, so running and spare caches stay at most max_running.
    if (!spare_caches_.empty()) spare_caches_.pop_back();
    return std::make_unique<KvCache>(transformer_.model().config, capacity);
  }
  std::unique_ptr<KvCache> cache = std::move(*best);
  spare_caches_.erase(best);
  cache->Reset();
  return cache;
}

void Scheduler::GiveBackCache(std::unique_ptr<KvCache> cache) {
  if (!cache) return;
  spare_caches_.push_back(std::move(cache));
  // A safeguard: TakeCache already keeps running and spare caches at most max_running.
  if (static_cast<int>(spare_caches_.size()) > options_.max_running) {
    auto smallest = std::min_element(
        spare_caches_.begin(), spare_caches_.end(),
        [](const auto& a, const auto& b) { return a->capacity() < b->capacity(); });
    spare_caches_.erase(smallest);
  }
}

int64_t Scheduler::NextChunk(const Sequence& s) const {
  const int64_t left = static_cast<int64_t>(s.job.prompt.size() - s.prefilled);
  const int64_t chunk = options_.prefill_chunk;
  return std::min(left, chunk - static_cast<int64_t>(s.prefilled) % chunk);
}

void Scheduler::StorePrefix(const Sequence& s) {
  if (!prefix_cache_) return;
  // Prefill rows rotate by the whole prompt's length, decoded rows by their own (rope.h).
  const int64_t prompt = static_cast<int64_t>(s.job.prompt.size());
  const bool prompt_long = transformer_.RotatesLong(prompt);
  prefix_cache_->Store(s.history, *s.cache, [&](int64_t p) {
    return p < prompt ? prompt_long : transformer_.RotatesLong(p + 1);
  });
  if (metrics_) metrics_->SetPrefixCache(prefix_cache_->stats(), prefix_cache_->budget_bytes());
}

void Scheduler::Retire(Sequence& s, const std::string& reason, const std::string& error) {
  if (s.done) return;
  s.done = true;
  // A failed pass may have left its rows half written; any other ending leaves every row
  // of the cache computed, for a later turn of the same conversation.
  if (reason != "error") StorePrefix(s);
  if (s.decoder && reason != "cancelled") {
    const std::string rest = s.stop_text.Push(s.decoder->Flush());
    s.handle->Append(rest + s.stop_text.Flush(), -1);
  }
  transformer_.EndRequest(s.id);
  if (metrics_ && s.generated > 0) {
    metrics_->CountTokens(static_cast<int64_t>(s.job.prompt.size()), s.generated);
    if (s.generated > 1)
      metrics_->ObserveTpot(std::chrono::duration<double>(Clock::now() - s.first_token).count() /
                            (s.generated - 1));
  }
  s.handle->Finish(reason, error);
}

void Scheduler::Emit(Sequence& s, int32_t token, TokenLogprobs* logprobs) {
  if (s.generated == 0) {
    s.first_token = Clock::now();
    if (metrics_)
      metrics_->ObserveTtft(
          std::chrono::duration<double>(s.first_token - s.handle->arrival()).count());
  }
  ++s.generated;
  s.history.push_back(token);
  const auto& stops = s.job.stop_ids;
  const bool stop_token = std::find(stops.begin(), stops.end(), token) != stops.end();
  std::string text;
  if (s.decoder && !stop_token) text = s.stop_text.Push(s.decoder->Push(token));
  s.handle->Append(text, token, stop_token ? nullptr : logprobs);
  if (stop_token || s.stop_text.stopped()) {
    Retire(s, "stop");
  } else if (s.generated >= s.job.max_tokens) {
    Retire(s, "length");
  }
}

void Scheduler::FormUnit() {
  const int n = static_cast<int>(running_.size());
  std::vector<policy::PassCandidate> candidates;
  candidates.reserve(running_.size());
  for (const auto& s : running_) {
    policy::PassCandidate c;
    c.request = s->id;
    if (s->decoding()) {
      c.tokens = &s->next;
      c.n_tokens = 1;
    } else {
      c.tokens = s->job.prompt.data() + s->prefilled;
      c.n_tokens = NextChunk(*s);
    }
    candidates.push_back(c);
  }
  // The input split: admission order, balanced. The policy sees it and may replace it.
  const std::vector<int> input = policy::ContiguousGroups(n, groups());
  std::vector<int> group = input;
  bool regrouped = false;
  // A failing policy costs the unit its regrouping, never a request: said once.
  auto warn = [this](const std::string& why) {
    if (!regroup_warned_) Log(LogLevel::kWarn, why, "; units keep admission order");
    regroup_warned_ = true;
  };
  policy::PassRegrouper* regrouper;
  {
    MutexLock lock(&mutex_);
    regrouper = regrouper_;
  }
  try {
    regrouped = regrouper != nullptr && regrouper->RegroupPasses(candidates, groups(), &group);
  } catch (const std::exception& e) {
    warn(std::string("token regrouping failed: ") + e.what());
  }
  const bool valid =
      group.size() == input.size() &&
      std::all_of(group.begin(), group.end(), [&](int g) { return g >= 0 && g < groups(); });
  if (!regrouped || !valid) {
    if (regrouped) warn("the policy's token regrouping is malformed");
    group = input;
    regrouped = false;
  }
  unit_.assign(static_cast<size_t>(groups()), {});
  for (int i = 0; i < n; ++i) unit_[static_cast<size_t>(group[i])].push_back(running_[i]->id);
  unit_pass_ = 0;
  if (metrics_) metrics_->CountUnit(regrouped && group != input);
}

bool Scheduler::RunPass() {
  // Requests that left since the last pass.
  const auto now = Clock::now();
  for (auto& s : running_) {
    if (s->handle->cancelled())
      Retire(*s, "cancelled");
    else if (now >= s->deadline)
      Retire(*s, "timeout", "the request timed out");
  }
  SweepRetired();
  running_count_ = static_cast<int>(running_.size());
  if (running_.empty()) return true;

  // With regrouping, this pass runs the next group of the unit (a new unit when the last
  // one is done); a group whose requests all left is skipped.
  const std::vector<int64_t>* members = nullptr;
  if (groups() > 1) {
    if (unit_pass_ >= unit_.size()) FormUnit();
    members = &unit_[unit_pass_++];
  }
  std::vector<Candidate> candidates;
  for (const auto& s : running_) {
    if (members && std::find(members->begin(), members->end(), s->id) == members->end()) continue;
    candidates.push_back(
        {s->id, s->decoding(), s->decoding() ? 1 : NextChunk(*s), s->cache->length()});
  }
  if (candidates.empty()) return true;  // An emptied group: on to the next.
  // Decodes first: one token each, they are what TPOT waits on; prompts take what is left.
  std::stable_partition(candidates.begin(), candidates.end(),
                        [](const Candidate& c) { return c.decoding; });
  const int64_t decodes = std::count_if(candidates.begin(), candidates.end(),
                                        [](const Candidate& c) { return c.decoding; });

  std::vector<BatchItem> batch;
  std::vector<Sequence*> owners;
  int64_t budget = options_.max_batch_tokens;
  int64_t decoded = 0, prefilled = 0;
  for (const Candidate& c : candidates) {
    auto it = std::find_if(running_.begin(), running_.end(),
                           [&](const auto& s) { return s->id == c.request; });
    if (it == running_.end() || c.tokens > budget) continue;
    if (std::find(owners.begin(), owners.end(), it->get()) != owners.end()) continue;
    Sequence& s = **it;
    if (s.decoding()) {
      batch.push_back({s.cache.get(), std::span<const int32_t>(&s.next, 1), false, s.id});
      ++decoded;
    } else {
      const size_t take = static_cast<size_t>(NextChunk(s));
      if (!pacer_.AllowsPrefill(decodes, prefilled + static_cast<int64_t>(take))) {
        if (metrics_) metrics_->CountDeferredPrefill();
        continue;  // Waits for a pass the decodes can afford.
      }
      prefilled += static_cast<int64_t>(take);
      batch.push_back({s.cache.get(),
                       std::span<const int32_t>(s.job.prompt).subspan(s.prefilled, take), false,
                       s.id, static_cast<int64_t>(s.job.prompt.size())});
    }
    owners.push_back(&s);
    budget -= static_cast<int64_t>(batch.back().tokens.size());
  }
  if (batch.empty()) return false;  // The pacer held every prefill back this time.

  std::vector<float> logits;
  try {
    const auto start = Clock::now();
    logits = transformer_.Forward(batch);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    pacer_.Observe(decoded, prefilled, ms);
    Log(LogLevel::kDebug, "pass: ", decoded, " decodes, ", prefilled, " prompt tokens of ",
        batch.size() - decoded, " requests, ", ms, " ms (", running_.size(), " running)");
  } catch (const std::exception& e) {
    // A failed pass (an expert-store read error, say) fails the requests in it; the
    // others and the server go on.
    for (Sequence* s : owners) Retire(*s, "error", e.what());
    SweepRetired();
    running_count_ = static_cast<int>(running_.size());
    return true;
  }
  if (metrics_)
    metrics_->ObservePass(static_cast<int64_t>(batch.size()), options_.max_batch_tokens - budget);
  const size_t vocab = static_cast<size_t>(transformer_.model().config.vocab_size);
  for (size_t b = 0; b < owners.size(); ++b) {
    Sequence& s = *owners[b];
    if (!s.decoding()) {
      s.prefilled += batch[b].tokens.size();
      if (!s.decoding()) continue;  // More prompt to go.
      StorePrefix(s);  // The whole prompt, for requests that share its start.
    }
    std::span<const float> row(&logits[b * vocab], vocab);
    try {
      CheckFiniteLogits(row);  // NaN/Inf weights fail this request, not the server.
    } catch (const std::exception& e) {
      Retire(s, "error", e.what());
      continue;
    }
    if (s.job.sampling.AdjustsLogits()) {  // Penalties and logit_bias, before any grammar.
      adjusted_.assign(row.begin(), row.end());
      AdjustLogits(s.job.sampling, s.history, s.job.prompt.size(), adjusted_);
      row = adjusted_;
    }
    if (s.matcher && !MaskToGrammar(s, row)) {
      // A grammar that can end here stops; one the vocabulary cannot continue is an error.
      if (s.matcher->IsComplete())
        Retire(s, "stop");
      else
        Retire(s, "error", "the grammar allows no token of the vocabulary here");
      continue;
    }
    s.next = s.sampler.Sample(s.matcher ? std::span<const float>(masked_) : row);
    const auto& stops = s.job.stop_ids;
    if (s.matcher && std::find(stops.begin(), stops.end(), s.next) == stops.end() &&
        !s.matcher->AcceptToken(s.next)) {
      Retire(s, "error", "internal error: the sampled token is outside the grammar");
      continue;
    }
    std::optional<TokenLogprobs> logprobs;
    if (s.job.logprobs >= 0)  // Of the model's own distribution: the raw row.
      logprobs = ComputeLogprobs(std::span<const float>(&logits[b * vocab], vocab), s.next,
                                 s.job.logprobs);
    Emit(s, s.next, logprobs ? &*logprobs : nullptr);
  }
  SweepRetired();
  running_count_ = static_cast<int>(running_.size());
  return true;
}

}  // namespace moex::serve

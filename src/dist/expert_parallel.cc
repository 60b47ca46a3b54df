#include "dist/expert_parallel.h"

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/logging.h"
#include "core/peak_rss.h"
#include "model/model_identity.h"
#include "policy/registry.h"

namespace moex::dist {

namespace {

using Seconds = MpiTransport::Duration;

std::vector<int> MoeLayersOf(const Model& model) {
  std::vector<int> layers;
  for (size_t l = 0; l < model.layers.size(); ++l)
    if (model.layers[l].is_moe) layers.push_back(static_cast<int>(l));
  return layers;
}

// What every rank must agree on: the checkpoint's content and the shape of its experts.
std::string ModelFingerprint(const Model& model) {
  const ModelConfig& c = model.config;
  return ModelContentId(model.path) + " layers=" + std::to_string(c.num_layers) +
         " experts=" + std::to_string(c.num_experts) +
         " hidden=" + std::to_string(model.expert_shape.hidden_size) +
         " neurons=" + std::to_string(model.expert_shape.neurons) +
         " dtype=" + model.ExpertDTypeLabel();
}

void SendAndWait(MpiTransport& t, int to, Tag tag, const std::vector<std::byte>& bytes,
                 Seconds timeout, const std::string& what) {
  t.Complete(t.PostSend(to, tag, bytes), timeout, what);
}

// Rank 0's side of the handshake: every worker says which model it opened; rank 0 answers
// each with the placement, or with why the run is refused (and then throws it too).
ExpertPlacement AgreeOnRankZero(const Model& model, MpiTransport& t,
                                const ExpertParallelOptions& options) {
  const Seconds startup(options.startup_timeout_s);
  const std::string mine = ModelFingerprint(model);
  std::string refusal;
  for (int r = 1; r < t.size(); ++r) {
    const std::vector<std::byte> bytes =
        t.Receive(r, Tag::kHandshake, startup, "the start-up handshake");
    const TextMessage hello = DecodeText(bytes);
    Check(hello.kind == MessageKind::kHello, "rank ", r, " sent no hello at start-up");
    if (hello.text != mine && refusal.empty())
      refusal = "rank " + std::to_string(r) + " opened a different model (" + hello.text +
                ") from rank 0's (" + mine + ")";
  }
  ExpertPlacement placement;
  if (refusal.empty()) {
    try {
      const std::vector<int> moe = MoeLayersOf(model);
      placement =
          options.placement_path.empty()
              ? ExpertPlacement::Balanced(model.config.num_layers, moe, model.config.num_experts,
                                          t.size(), options.frequency)
              : ExpertPlacement::Load(options.placement_path);
      placement.Validate(model.config.num_layers, moe, model.config.num_experts, t.size());
    } catch (const Error& e) {
      refusal = e.what();
    }
  }
  const std::string verdict =
      refusal.empty() ? "ok\n" + placement.ToJson().dump() : "refused\n" + refusal;
  for (int r = 1; r < t.size(); ++r)
    SendAndWait(t, r, Tag::kHandshake, EncodeText({MessageKind::kVerdict, verdict, {}}), startup,
                "the start-up verdict");
  Check(refusal.empty(), "expert parallelism refused: ", refusal);
  return placement;
}

ExpertPlacement AgreeOnWorker(const Model& model, MpiTransport& t,
                              const ExpertParallelOptions& options) {
  const Seconds startup(options.startup_timeout_s);
  SendAndWait(t, 0, Tag::kHandshake, EncodeText({MessageKind::kHello, ModelFingerprint(model), {}}),
              startup, "the start-up hello");
  const TextMessage verdict =
      DecodeText(t.Receive(0, Tag::kHandshake, startup, "the start-up verdict"));
  Check(verdict.kind == MessageKind::kVerdict, "rank 0 sent no verdict at start-up");
  const size_t eol = verdict.text.find('\n');
  const std::string head = verdict.text.substr(0, eol);
  const std::string body = eol == std::string::npos ? "" : verdict.text.substr(eol + 1);
  Check(head == "ok", "rank 0 refused the run: ", body);
  ExpertPlacement placement = ExpertPlacement::FromJson(nlohmann::json::parse(body));
  placement.Validate(model.config.num_layers, MoeLayersOf(model), model.config.num_experts,
                     t.size());
  return placement;
}

// One rank's experts: resident, or offloaded through the rank's own store, cache and policy.
std::unique_ptr<MoeExecutor> LoadShard(const Model& model, int rank,
                                       const ExpertPlacement& placement,
                                       const ExpertParallelOptions& options) {
  HoldsExpert holds = [&placement, rank](int layer, int expert) {
    return placement.Owns(rank, layer, expert);
  };
  if (!options.offload) return std::make_unique<ResidentMoeExecutor>(model, holds);
  OffloadOptions o = *options.offload;
  o.holds = std::move(holds);
  o.progress = o.progress && rank == 0;  // One progress bar per job.
  return std::make_unique<OffloadMoeExecutor>(model, o);
}

// A rank's own offload stack sees every event, but a gate only with the routed experts the
// rank holds, and not at all when it holds none of them (as the simulator's ranks do).
class OwnExpertsSink final : public policy::EventSink {
 public:
  OwnExpertsSink(policy::EventSink& stack, const ExpertPlacement& placement, int rank)
      : stack_(stack), placement_(placement), rank_(rank) {}
  void OnRequestBegin(const policy::RequestBeginEvent& e) override { stack_.OnRequestBegin(e); }
  void OnIterationBegin(const policy::IterationBeginEvent& e) override {
    stack_.OnIterationBegin(e);
  }
  void OnGate(const policy::GateEvent& e) override {
    routed_.clear();
    for (int32_t id : e.routed_experts())
      if (placement_.Owns(rank_, e.layer, id)) routed_.push_back(id);
    if (routed_.empty()) return;
    policy::GateEvent mine = e;
    mine.routed = routed_.data();
    mine.n_routed = static_cast<int64_t>(routed_.size());
    stack_.OnGate(mine);
  }
  void OnExpertDone(const policy::ExpertDoneEvent& e) override { stack_.OnExpertDone(e); }
  void OnIterationEnd() override { stack_.OnIterationEnd(); }
  void OnRequestEnd(const policy::RequestEndEvent& e) override { stack_.OnRequestEnd(e); }

 private:
  policy::EventSink& stack_;
  const ExpertPlacement& placement_;
  int rank_;
  std::vector<int32_t> routed_;
};

// The store side of a rank's counters (zero when its experts are resident).
void AddStoreCounters(const MoeExecutor& shard, WorkerCounters* c) {
  const auto* offload = dynamic_cast<const OffloadMoeExecutor*>(&shard);
  c->expert_bytes = static_cast<int64_t>(shard.HostCacheBytes());
  if (offload == nullptr) return;
  const tiers::OffloadMetrics m = offload->Metrics();
  c->hits = m.total.counters.hits;
  c->misses = m.total.counters.misses;
  c->bytes_read = m.total.bytes_read;
  c->store_wait_ms = m.total.stall_ms;
}

// A worker's life: compute whatever layer rank 0 sends, until it says the run is over.
void ServeExperts(const Model& model, MpiTransport& t, const ExpertPlacement& placement,
                  const ExpertParallelOptions& options) {
  const int rank = t.rank();
  const Seconds startup(options.startup_timeout_s);
  std::unique_ptr<MoeExecutor> shard;
  try {
    shard = LoadShard(model, rank, placement, options);
  } catch (const Error& e) {
    SendAndWait(t, 0, Tag::kHandshake, EncodeText({MessageKind::kFailure, e.what(), {}}), startup,
                "its start-up failure");
    // Said here too: the job may end before rank 0 has said it.
    throw Error("rank " + std::to_string(rank) + " could not load its experts: " + e.what());
  }
  SendAndWait(t, 0, Tag::kHandshake, EncodeText({MessageKind::kReady, "", {}}), startup,
              "its start-up");
  std::unique_ptr<OwnExpertsSink> events;
  if (shard->event_sink() != nullptr)
    events = std::make_unique<OwnExpertsSink>(*shard->event_sink(), placement, rank);
  std::string events_failed;  // Once its policy failed on an event, every request fails.
  const int64_t d = model.expert_shape.hidden_size;
  const Seconds timeout(options.timeout_s);
  WorkerCounters counters;
  AddStoreCounters(*shard, &counters);
  std::vector<float> inputs, outputs;
  // The peak RSS is read from /proc at most once a second, not once per layer message.
  counters.peak_rss_bytes = PeakRssBytes();
  Stopwatch since_rss;
  for (;;) {
    const std::vector<std::byte> request = t.Receive(0, Tag::kRequest, std::nullopt, "a request");
    if (since_rss.ElapsedMs() >= 1000) {
      counters.peak_rss_bytes = PeakRssBytes();
      since_rss.Reset();
    }
    MessageKind kind = MessageKind::kFailure;
    try {
      kind = KindOf(request);
    } catch (const Error& e) {  // Answered like any failed request: rank 0 names this rank.
      SendAndWait(t, 0, Tag::kReply, EncodeText({MessageKind::kFailure, e.what(), counters}),
                  timeout, "its answer");
      continue;
    }
    if (kind == MessageKind::kEvents) {
      if (!events_failed.empty()) continue;
      try {
        Check(events != nullptr, "rank 0 sent policy events to a rank without offloading");
        const TextMessage batch = DecodeText(request);
        ReplayEvents(std::as_bytes(std::span(batch.text.data(), batch.text.size())), *events);
      } catch (const Error& e) {
        events_failed = e.what();
      }
      continue;
    }
    if (kind == MessageKind::kShutdown) {
      AddStoreCounters(*shard, &counters);
      counters.peak_rss_bytes = PeakRssBytes();
      SendAndWait(t, 0, Tag::kReply, EncodeText({MessageKind::kShutdown, "", counters}), timeout,
                  "its last counters");
      t.MarkFinished();
      return;
    }
    std::vector<std::byte> answer;
    try {
      Check(events_failed.empty(), "its policy failed on an event: ", events_failed);
      const LayerMessage in = DecodeLayer(request, d);
      // Each expert's rows gathered from the distinct token rows, as the kernels take them.
      const size_t total = in.token_of_row.size();
      inputs.resize(total * static_cast<size_t>(d));
      for (size_t i = 0; i < total; ++i)
        std::memcpy(&inputs[i * static_cast<size_t>(d)],
                    in.rows.data() + static_cast<int64_t>(in.token_of_row[i]) * d,
                    sizeof(float) * static_cast<size_t>(d));
      outputs.assign(inputs.size(), 0.0f);
      std::vector<ExpertRows> rows;
      int64_t at = 0;
      for (const ExpertSpan& s : in.experts) {
        rows.push_back({s.expert, s.rows, inputs.data() + at * d, outputs.data() + at * d});
        at += s.rows;
      }
      Stopwatch clock;
      shard->Compute(in.layer, rows);
      counters.compute_ms += clock.ElapsedMs();
      counters.experts_computed += static_cast<int64_t>(rows.size());
      counters.rows_computed += at;
      if (events != nullptr) AddStoreCounters(*shard, &counters);
      answer = EncodeLayer({MessageKind::kOutputs, in.layer, in.experts, counters, 0, {}, outputs});
    } catch (const Error& e) {
      answer = EncodeText({MessageKind::kFailure, e.what(), counters});
    }
    SendAndWait(t, 0, Tag::kReply, answer, timeout, "its answer");
  }
}

}  // namespace

std::unique_ptr<MoeExecutor> StartExpertParallel(const Model& model,
                                                 const ExpertParallelOptions& options) {
  MpiTransport& t = MpiTransport::Start();
  if (t.rank() != 0) {
    ServeExperts(model, t, AgreeOnWorker(model, t, options), options);
    return nullptr;
  }
  ExpertPlacement placement = AgreeOnRankZero(model, t, options);
  return std::make_unique<ExpertParallelExecutor>(model, t, std::move(placement), options);
}

ExpertParallelExecutor::ExpertParallelExecutor(const Model& model, MpiTransport& transport,
                                               ExpertPlacement placement,
                                               const ExpertParallelOptions& options)
    : model_(model),
      transport_(transport),
      placement_(std::move(placement)),
      options_(options),
      local_(LoadShard(model, 0, placement_, options_)),
      events_(
          static_cast<size_t>(transport.size()),
          EventBatch(options.offload ? policy::SpecTraceReads(options.offload->policy.spec) : 0u)),
      event_bytes_(static_cast<size_t>(transport.size())),
      links_(static_cast<size_t>(transport.size())) {
  if (local_->event_sink() != nullptr)
    local_events_ = std::make_unique<OwnExpertsSink>(*local_->event_sink(), placement_, 0);
  // Every worker has loaded its experts (or says why it could not) before the first layer.
  const Seconds startup(options.startup_timeout_s);
  for (int r = 1; r < transport_.size(); ++r) {
    const TextMessage ready =
        DecodeText(transport_.Receive(r, Tag::kHandshake, startup, "loading its experts"));
    if (ready.kind != MessageKind::kReady) {
      failure_ = "rank " + std::to_string(r) + " could not load its experts: " + ready.text;
      throw transport_.Broken(failure_);
    }
  }
}

ExpertParallelExecutor::~ExpertParallelExecutor() {
  try {
    Shutdown();
  } catch (const Error& e) {
    Log(LogLevel::kError, "expert parallelism: ", e.what());
  }
}

void ExpertParallelExecutor::Shutdown() {
  if (!failure_.empty() || transport_.broken()) return;  // The job aborts at exit instead.
  const Seconds timeout(options_.timeout_s);
  const std::vector<std::byte> bye = EncodeText({MessageKind::kShutdown, "", {}});
  for (int r = 1; r < transport_.size(); ++r) {
    FlushEvents(r);  // Its last iteration_end and request_end.
    SendAndWait(transport_, r, Tag::kRequest, bye, timeout, "the end of the run");
  }
  for (int r = 1; r < transport_.size(); ++r) {
    const TextMessage last =
        DecodeText(transport_.Receive(r, Tag::kReply, timeout, "the end of the run"));
    links_[static_cast<size_t>(r)].counters = last.counters;
  }
  transport_.MarkFinished();
}

void ExpertParallelExecutor::Run(int layer, const Routing& routing, const float* x, float* out) {
  if (!failure_.empty()) throw RankFailure("expert parallelism stopped: " + failure_);
  const int64_t d = model_.expert_shape.hidden_size;
  // With the routing weight on the expert's input (Llama 4) every row differs, so each row
  // travels as built; otherwise a token's row travels once per rank.
  const bool weighted_rows = model_.config.expert_weight_on_input;
  batch_.Build(routing, x, d, weighted_rows);
  const int ranks = transport_.size();
  // Per rank, its experts with tokens in this pass; for the workers' experts, the tokens of
  // their rows in the batch's row order (slot order, as ExpertBatch::Build fills them).
  std::vector<std::vector<ExpertSpan>> spans(static_cast<size_t>(ranks));
  std::vector<ExpertRows> mine;
  for (int32_t e : batch_.active_experts()) {
    const int r = placement_.rank_of(layer, e);
    if (r == 0)
      mine.push_back({e, batch_.tokens_of(e), batch_.inputs_of(e), batch_.outputs_of(e)});
    else
      spans[static_cast<size_t>(r)].push_back({e, batch_.tokens_of(e)});
  }
  tokens_of_.resize(static_cast<size_t>(routing.num_experts));
  for (auto& tokens : tokens_of_) tokens.clear();
  for (int64_t slot = 0; slot < routing.n_tokens * routing.top_k; ++slot) {
    const int32_t e = routing.ids[static_cast<size_t>(slot)];
    if (placement_.rank_of(layer, e) != 0)
      tokens_of_[static_cast<size_t>(e)].push_back(static_cast<int32_t>(slot / routing.top_k));
  }
  const Seconds timeout(options_.timeout_s);
  try {
    std::vector<std::vector<std::byte>> requests(static_cast<size_t>(ranks));
    std::vector<int> sends(static_cast<size_t>(ranks), -1);
    std::vector<int> event_sends(static_cast<size_t>(ranks), -1);
    std::vector<float> rows;
    std::vector<int32_t> token_of_row;
    std::vector<int32_t> index_of_token(static_cast<size_t>(routing.n_tokens));
    for (int r = 1; r < ranks; ++r) {
      const std::vector<ExpertSpan>& s = spans[static_cast<size_t>(r)];
      if (s.empty()) continue;
      // Each token once, however many of the rank's experts it is routed to.
      std::fill(index_of_token.begin(), index_of_token.end(), -1);
      rows.clear();
      token_of_row.clear();
      int32_t distinct = 0;
      for (const ExpertSpan& e : s) {
        if (weighted_rows) {
          const float* in = batch_.inputs_of(e.expert);
          rows.insert(rows.end(), in, in + e.rows * d);
          for (int64_t j = 0; j < e.rows; ++j) token_of_row.push_back(distinct++);
          continue;
        }
        for (int32_t t : tokens_of_[static_cast<size_t>(e.expert)]) {
          int32_t& index = index_of_token[static_cast<size_t>(t)];
          if (index < 0) {
            index = distinct++;
            rows.insert(rows.end(), x + t * d, x + (t + 1) * d);
          }
          token_of_row.push_back(index);
        }
      }
      requests[static_cast<size_t>(r)] =
          EncodeLayer({MessageKind::kLayer, layer, s, {}, distinct, token_of_row, rows});
      event_sends[static_cast<size_t>(r)] = PostEvents(r);  // Its gate among them.
      sends[static_cast<size_t>(r)] =
          transport_.PostSend(r, Tag::kRequest, requests[static_cast<size_t>(r)]);
      RankLink& link = links_[static_cast<size_t>(r)];
      link.bytes_sent += static_cast<int64_t>(requests[static_cast<size_t>(r)].size());
      ++link.messages;
    }
    if (!mine.empty()) local_->Compute(layer, mine);  // While the requests travel.
    for (int r = 1; r < ranks; ++r) {
      if (sends[static_cast<size_t>(r)] < 0) continue;
      RankLink& link = links_[static_cast<size_t>(r)];
      Stopwatch waited;
      const std::string what = "layer " + std::to_string(layer);
      if (event_sends[static_cast<size_t>(r)] >= 0)
        transport_.Complete(event_sends[static_cast<size_t>(r)], timeout, what);
      transport_.Complete(sends[static_cast<size_t>(r)], timeout, what);
      const std::vector<std::byte> answer = transport_.Receive(r, Tag::kReply, timeout, what);
      link.wait_ms += waited.ElapsedMs();
      link.bytes_received += static_cast<int64_t>(answer.size());
      if (KindOf(answer) == MessageKind::kFailure) {
        const TextMessage failed = DecodeText(answer);
        link.counters = failed.counters;
        throw transport_.Broken("rank " + std::to_string(r) + " failed on layer " +
                                std::to_string(layer) + ": " + failed.text);
      }
      const LayerMessage got = DecodeLayer(answer, d);
      const std::vector<ExpertSpan>& asked = spans[static_cast<size_t>(r)];
      bool same = got.layer == layer && got.experts.size() == asked.size();
      for (size_t i = 0; same && i < asked.size(); ++i)
        same = got.experts[i].expert == asked[i].expert && got.experts[i].rows == asked[i].rows;
      if (!same)
        throw transport_.Broken("rank " + std::to_string(r) + " answered layer " +
                                std::to_string(layer) + " with other experts than asked");
      link.counters = got.counters;
      int64_t at = 0;
      for (const ExpertSpan& e : asked) {
        std::memcpy(batch_.outputs_of(e.expert), got.rows.data() + at * d,
                    sizeof(float) * static_cast<size_t>(e.rows * d));
        at += e.rows;
      }
    }
  } catch (const Error& e) {
    failure_ = e.what();
    throw;
  }
  batch_.Combine(routing, model_.layers[static_cast<size_t>(layer)], out);
}

int ExpertParallelExecutor::PostEvents(int r) {
  EventBatch& batch = events_[static_cast<size_t>(r)];
  if (batch.empty()) return -1;
  const std::string body = batch.Take();
  std::vector<std::byte>& bytes = event_bytes_[static_cast<size_t>(r)];
  bytes = EncodeText({MessageKind::kEvents, body, {}});
  RankLink& link = links_[static_cast<size_t>(r)];
  link.bytes_sent += static_cast<int64_t>(bytes.size());
  ++link.messages;
  return transport_.PostSend(r, Tag::kRequest, bytes);
}

void ExpertParallelExecutor::FlushEvents(int r) {
  const int send = PostEvents(r);
  if (send >= 0) transport_.Complete(send, Seconds(options_.timeout_s), "policy events");
}

// Rank 0's own stack first (it may throw: the event then stops here, as in one process),
// then each worker's batch; a gate goes only to the workers that compute that layer.
void ExpertParallelExecutor::OnRequestBegin(const policy::RequestBeginEvent& e) {
  if (local_events_) local_events_->OnRequestBegin(e);
  for (size_t r = 1; r < events_.size(); ++r) events_[r].Add(e);
}

void ExpertParallelExecutor::OnIterationBegin(const policy::IterationBeginEvent& e) {
  if (local_events_) local_events_->OnIterationBegin(e);
  for (size_t r = 1; r < events_.size(); ++r) events_[r].Add(e);
}

void ExpertParallelExecutor::OnGate(const policy::GateEvent& e) {
  if (local_events_) local_events_->OnGate(e);
  for (int r = 1; r < static_cast<int>(events_.size()); ++r) {
    bool computes = false;
    for (int32_t id : e.routed_experts()) computes = computes || placement_.Owns(r, e.layer, id);
    if (computes) events_[static_cast<size_t>(r)].Add(e);
  }
}

void ExpertParallelExecutor::OnExpertDone(const policy::ExpertDoneEvent& e) {
  if (local_events_) local_events_->OnExpertDone(e);
}

void ExpertParallelExecutor::OnIterationEnd() {
  if (local_events_) local_events_->OnIterationEnd();
  for (size_t r = 1; r < events_.size(); ++r) events_[r].AddIterationEnd();
  // The workers' policies may act between passes (prefetch for the next one): send now. On
  // a failed run nothing more is sent (this is also the forward pass's error path).
  if (!failure_.empty() || transport_.broken()) return;
  try {
    for (int r = 1; r < transport_.size(); ++r) FlushEvents(r);
  } catch (const Error& e) {
    failure_ = e.what();
    throw;
  }
}

void ExpertParallelExecutor::OnRequestEnd(const policy::RequestEndEvent& e) {
  if (local_events_) local_events_->OnRequestEnd(e);
  for (size_t r = 1; r < events_.size(); ++r) events_[r].Add(e);
}

nlohmann::json ExpertParallelExecutor::MetricsJson() const {
  // The top-level counters are rank 0's own; per_rank has every rank's.
  nlohmann::json out = local_->MetricsJson();
  if (!options_.offload) out["policy"] = "expert-parallel";
  WorkerCounters own;
  AddStoreCounters(*local_, &own);
  nlohmann::json ranks = nlohmann::json::array();
  int64_t sent = 0, received = 0;
  double wait = 0;
  for (int r = 0; r < transport_.size(); ++r) {
    const RankLink& link = links_[static_cast<size_t>(r)];
    const WorkerCounters& c = r == 0 ? own : link.counters;
    nlohmann::json rank = {{"rank", r},
                           {"experts", placement_.ExpertCount(r)},
                           {"expert_bytes", c.expert_bytes},
                           {"hits", c.hits},
                           {"misses", c.misses},
                           {"store_bytes_read", c.bytes_read},
                           {"store_wait_ms", c.store_wait_ms}};
    if (r == 0) {
      rank["peak_rss_bytes"] = PeakRssBytes();
    } else {
      rank["peak_rss_bytes"] = c.peak_rss_bytes;
      rank["bytes_sent"] = link.bytes_sent;
      rank["bytes_received"] = link.bytes_received;
      rank["messages"] = link.messages;
      rank["wait_ms"] = link.wait_ms;
      rank["compute_ms"] = c.compute_ms;
      rank["experts_computed"] = c.experts_computed;
      rank["rows_computed"] = c.rows_computed;
      sent += link.bytes_sent;
      received += link.bytes_received;
      wait += link.wait_ms;
    }
    ranks.push_back(std::move(rank));
  }
  out["expert_parallel"] = {
      {"ranks", transport_.size()},
      {"offloaded", options_.offload.has_value()},
      {"placement", !options_.placement_path.empty()    ? options_.placement_path
                    : !options_.placement_label.empty() ? options_.placement_label
                                                        : "balanced"},
      {"network_bytes_sent", sent},
      {"network_bytes_received", received},
      {"network_wait_ms", wait},
      {"per_rank", std::move(ranks)}};
  return out;
}

std::vector<std::vector<float>> ExpertParallelExecutor::ResidentShare() const {
  std::vector<std::vector<float>> share = local_->ResidentShare();
  const float remote = options_.offload ? 0.0f : 1.0f;
  for (size_t l = 0; l < share.size(); ++l) {
    if (!model_.layers[l].is_moe) continue;
    share[l].resize(static_cast<size_t>(model_.config.num_experts), 0.0f);
    for (int e = 0; e < model_.config.num_experts; ++e)
      if (!placement_.Owns(0, static_cast<int>(l), e)) share[l][static_cast<size_t>(e)] = remote;
  }
  return share;
}

}  // namespace moex::dist

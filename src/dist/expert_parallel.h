// Expert parallelism over MPI ranks (docs/expert-parallel.md). Every rank opens the same
// model; the routed experts are spread over the ranks by an ExpertPlacement, and each rank
// packs only its own share. Rank 0 runs the forward pass: per MoE layer it computes the
// experts it holds and sends the input rows of the others to their ranks, which answer with
// one output row per (token, expert). Rank 0 writes them where its own outputs would be and
// combines in the one-process order, so the logits equal one process's bit for bit,
// whatever the number of ranks.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/event_messages.h"
#include "dist/expert_messages.h"
#include "dist/expert_placement.h"
#include "dist/mpi_transport.h"
#include "engine/moe_executor.h"

namespace moex::dist {

struct ExpertParallelOptions {
  std::string placement_path;   // A placement file (rank 0 reads it); empty: balanced.
  std::string placement_label;  // How the balanced placement was made, for reports.
  // Routed-token counts [layer][expert] that the balanced placement spreads (empty: the
  // experts are dealt out in id order).
  std::vector<std::vector<int64_t>> frequency;
  // How long rank 0 waits for a worker's answer to one layer, and a worker for rank 0 to
  // take its answer, before the run ends with an error naming the rank.
  double timeout_s = 60;
  // How long the start-up handshake waits for every rank to have opened the model, and
  // rank 0 for every rank to have loaded its experts (packed its store, if it must).
  double startup_timeout_s = 600;
  // Unset: each rank keeps its experts resident. Set: each rank offloads its own experts
  // through its own expert store, host cache and policy (the same options on every rank; a
  // share budget is of the rank's own experts); rank 0 relays the policy events to the
  // workers (event_messages.h).
  std::optional<OffloadOptions> offload;
};

// Starts expert parallelism on every rank of the MPI job. On rank 0 returns the executor of
// the forward pass. On the other ranks serves experts until rank 0's executor is destroyed,
// then returns null: the caller ends the process. Throws Error when the ranks opened
// different models, the placement does not fit the model or the rank count, or a rank fails.
std::unique_ptr<MoeExecutor> StartExpertParallel(const Model& model,
                                                 const ExpertParallelOptions& options);

// Rank 0's executor: its own experts (resident or offloaded), the rest on the other ranks.
// With offloading it is also the event sink of the forward pass: rank 0's own stack sees
// each event (a gate only with its own routed experts), and every worker gets the same
// events in order, a gate only when it computes that layer.
class ExpertParallelExecutor : public MoeExecutor, public policy::EventSink {
 public:
  // Loads rank 0's experts, then waits for every worker to have loaded its own; throws
  // Error naming a worker that could not.
  ExpertParallelExecutor(const Model& model, MpiTransport& transport, ExpertPlacement placement,
                         const ExpertParallelOptions& options);
  // Tells every worker the run is over and collects their last counters.
  ~ExpertParallelExecutor() override;

  void Run(int layer, const Routing& routing, const float* x, float* out) override;
  // The local executor's counters, plus "expert_parallel": per rank the experts and expert
  // bytes it holds, its peak RSS, and for the workers the bytes sent to and received from
  // it, the messages, the time rank 0 waited for it and the time it computed.
  nlohmann::json MetricsJson() const override;
  size_t HostCacheBytes() const override { return local_->HostCacheBytes(); }
  // Rank 0's experts as its executor holds them; the workers' as 1 when resident and 0
  // when offloaded (their caches are not reported to rank 0 expert by expert).
  std::vector<std::vector<float>> ResidentShare() const override;
  policy::EventSink* event_sink() override { return options_.offload ? this : nullptr; }
  policy::PassRegrouper* regrouper() override { return local_->regrouper(); }

  void OnRequestBegin(const policy::RequestBeginEvent& e) override;
  void OnIterationBegin(const policy::IterationBeginEvent& e) override;
  void OnGate(const policy::GateEvent& e) override;
  void OnExpertDone(const policy::ExpertDoneEvent& e) override;
  void OnIterationEnd() override;
  void OnRequestEnd(const policy::RequestEndEvent& e) override;

 private:
  struct RankLink {
    int64_t bytes_sent = 0;
    int64_t bytes_received = 0;
    int64_t messages = 0;
    double wait_ms = 0;       // Rank 0 blocked on this rank's answer after its own experts.
    WorkerCounters counters;  // The worker's, as of its last answer.
  };
  void Shutdown();
  // Posts worker `r`'s pending events, if any (rank 0 -> worker, no answer); returns the
  // send to complete, or -1. The bytes stay in event_bytes_[r] until then.
  int PostEvents(int r);
  // Posts and completes it.
  void FlushEvents(int r);

  const Model& model_;
  MpiTransport& transport_;
  ExpertPlacement placement_;
  ExpertParallelOptions options_;
  std::unique_ptr<MoeExecutor> local_;
  std::unique_ptr<policy::EventSink> local_events_;  // Rank 0's stack, its own gates only.
  std::vector<EventBatch> events_;                   // Per rank: not yet sent ([0] unused).
  std::vector<std::vector<std::byte>> event_bytes_;  // Per rank: the batch being sent.
  ExpertBatch batch_;
  std::vector<std::vector<int32_t>> tokens_of_;  // Per expert: its rows' tokens (this layer).
  std::vector<RankLink> links_;                  // Indexed by rank; [0] unused.
  std::string failure_;                          // The first failure; every later Run repeats it.
};

}  // namespace moex::dist

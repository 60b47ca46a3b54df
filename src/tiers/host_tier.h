// The host tier of the CPU-only configuration: a budgeted page arena holding chunks of
// experts read from the expert store. It joins the deterministic OffloadController (what
// should be where) with the asynchronous FetchEngine over a StorageLink (moving it), and
// gives the MoE executor the pages to compute from and the waits it needs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "io/expert_store.h"
#include "io/weight_source.h"
#include "model/model_config.h"
#include "policy/event_sink.h"
#include "policy/policy.h"
#include "policy/policy_worker.h"
#include "tiers/fetch_engine.h"
#include "tiers/offload_controller.h"
#include "tiers/offload_metrics.h"
#include "tiers/policy_assembly.h"
#include "tiers/storage_link.h"

namespace moex::tiers {

struct HostTierOptions {
  int64_t budget_bytes = 0;  // Hard limit on cached expert pages.
  PolicyOptions policy;
  const WeightSource* weights = nullptr;  // Router weights for predicting policies.
  int chunk_neurons = 0;  // 0: largest power-of-two multiple of the store block <= 1 MiB.
  int queue_depth = 32;   // Reads in flight; a quarter is reserved for demand.
  bool direct_io = true;  // O_DIRECT where the filesystem allows it.
};

// The engine's offload stack as one event sink: each event goes to the controller, and the
// cache commands it answers with are executed at once (reads queued, pages released).
class HostTier final : public policy::EventSink {
 public:
  HostTier(ExpertStore store, const ModelConfig& config, const HostTierOptions& options);
  ~HostTier();

  // Bytes the cache needs to hold every expert (what "100%" means).
  static int64_t FullFootprint(const ExpertStore& store, int chunk_neurons);
  static int AutoChunkNeurons(const ExpertStore& store);

  // Events (engine thread). The gate's demand is planned at OnGate (routed experts pinned,
  // misses inserted); the executor takes the plan with TakePlan and emits expert_done.
  void OnRequestBegin(const policy::RequestBeginEvent& e) override;
  void OnIterationBegin(const policy::IterationBeginEvent& e) override;
  void OnGate(const policy::GateEvent& e) override;
  void OnExpertDone(const policy::ExpertDoneEvent& e) override;
  void OnIterationEnd() override;
  void OnRequestEnd(const policy::RequestEndEvent& e) override;
  // The routed experts of `layer`'s gate, in compute-preference order, once. Throws Error
  // when that gate was not emitted to this tier (a transformer without the stack's sink).
  std::vector<PlannedExpert> TakePlan(int layer);
  // After a failed read: unpin without an expert_done event; `drop` forgets the expert.
  void Abandon(const ExpertKey& key, bool drop);

  const CacheGeometry& geometry() const { return geometry_; }
  int32_t PageOf(const ExpertKey& key, int chunk) const;
  uint32_t Generation(int32_t page) const;
  const std::byte* PageData(int32_t page) const;
  ChunkState State(int32_t page, uint32_t generation, std::string* error) const;

  // Staging pages hold chunks of experts streamed past a full cache.
  int num_staging_pages() const { return staging_pages_; }
  int32_t StagingPage(int i) const { return static_cast<int32_t>(geometry_.capacity_pages) + i; }
  // Reads a chunk into a staging page as demand; returns the generation to wait for.
  uint32_t StreamChunk(const ExpertKey& key, int chunk, int32_t staging_page);

  // Completions so far. Read it before checking chunk states, then WaitForLanding(seen)
  // cannot miss a landing that happened in between. The wait is charged as stall.
  uint64_t completions() const { return fetch_->completions(); }
  void WaitForLanding(int layer, uint64_t seen);

  const ExpertStore& store() const { return store_; }
  OffloadController& controller() { return *controller_; }
  // The facts the policy was built with (for saving its state).
  const policy::PolicyFacts& policy_facts() const { return facts_; }
  OffloadMetrics Metrics() const;
  // Test hook: the read completing `after` reads from now fails with EIO.
  void InjectReadError(int64_t after);

 private:
  void Execute(std::vector<CacheCommand>& commands);
  bool Landed(const ExpertKey& key) const;
  // A read of `chunk` into `page` (not const: the read will write the page).
  FetchRequest Request(const ExpertKey& key, int chunk, int32_t page, uint32_t generation,
                       bool demand, double priority);
  std::string Verify(const FetchRequest& r) const;

  ExpertStore store_;
  ModelConfig config_;
  HostTierOptions options_;
  CacheGeometry geometry_;
  policy::PolicyFacts facts_;
  int staging_pages_ = 0;
  // Cache and staging pages: anonymous memory (huge pages where allowed), so RSS follows
  // what the cache holds; owned here, so a constructor that throws later unmaps it.
  AlignedBuffer arena_;
  std::unique_ptr<OffloadController> controller_;
  std::unique_ptr<FetchEngine> fetch_;
  StorageLink* storage_ = nullptr;  // Owned by fetch_.
  std::vector<uint32_t> staging_gen_;
  std::vector<double> stall_ms_;  // Per decoder layer.
  std::vector<CacheCommand> commands_;
  std::vector<PlannedExpert> plan_;  // Of the last gate, until taken.
  int plan_layer_ = -1;              // Its layer; -1 once taken.
};

}  // namespace moex::tiers

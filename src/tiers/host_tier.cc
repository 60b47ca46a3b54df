#include "tiers/host_tier.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/logging.h"
#include "model/expert_store_packer.h"
#include "tiers/cache_plan.h"
#include "tiers/storage_link.h"

namespace moex::tiers {

namespace {
ExpertGeometry GeometryOf(const ExpertStore& store, int num_layers) {
  ExpertGeometry g;
  g.num_layers = num_layers;
  g.num_moe_layers = static_cast<int>(store.moe_layers().size());
  g.num_experts = store.num_experts();
  g.neurons = store.neurons();
  g.record_bytes = static_cast<int64_t>(store.record_bytes());
  g.block_neurons = static_cast<int>(store.block_neurons());
  return g;
}
}  // namespace

int HostTier::AutoChunkNeurons(const ExpertStore& store) {
  return tiers::AutoChunkNeurons(GeometryOf(store, 0));
}

int64_t HostTier::FullFootprint(const ExpertStore& store, int chunk) {
  return tiers::FullFootprint(GeometryOf(store, 0), chunk);
}

HostTier::HostTier(ExpertStore store, const ModelConfig& config, const HostTierOptions& options)
    : store_(std::move(store)), config_(config), options_(options) {
  geometry_ =
      PlanCache(GeometryOf(store_, config.num_layers), options.chunk_neurons, options.budget_bytes);
  // Enough staging to overlap reads of one streamed expert with compute.
  staging_pages_ =
      std::max(4, std::min(geometry_.chunks_per_expert() + 2, 2 * options.queue_depth));

  const int64_t pages = geometry_.capacity_pages + staging_pages_;
  const size_t arena_bytes = static_cast<size_t>(pages * geometry_.page_bytes);
  try {
    arena_ = AlignedBuffer(arena_bytes);
  } catch (const std::bad_alloc&) {
    Fail("cannot reserve ", arena_bytes, " bytes for the host expert cache");
  }

  AssembledController assembled =
      AssembleController(options.policy, config, geometry_,
                         static_cast<int64_t>(store_.expert_bytes()), options.weights);
  controller_ = std::move(assembled.controller);
  facts_ = std::move(assembled.facts);

  auto link = std::make_unique<StorageLink>(store_.path(), options.queue_depth, options.direct_io);
  storage_ = link.get();
  fetch_ =
      std::make_unique<FetchEngine>(std::move(link), static_cast<int>(pages), config.num_layers,
                                    MaxPrefetchInFlight(options.queue_depth),
                                    [this](const FetchRequest& r) { return Verify(r); });
  staging_gen_.assign(static_cast<size_t>(staging_pages_), 0);
  controller_->set_landed_probe([this](const ExpertKey& k) { return Landed(k); });
  stall_ms_.assign(static_cast<size_t>(config.num_layers), 0);
  Log(LogLevel::kInfo, "host expert cache: ", geometry_.capacity_pages, " pages of ",
      geometry_.page_bytes, " bytes (", geometry_.chunk_neurons, " neurons), budget ",
      options.budget_bytes, " bytes, policy ", controller_->policy().name(),
      storage_->direct() ? ", O_DIRECT" : ", buffered reads");
}

HostTier::~HostTier() {
  fetch_.reset();  // Drains in-flight reads before the arena goes.
}

FetchRequest HostTier::Request(const ExpertKey& key, int chunk, int32_t page, uint32_t generation,
                               bool demand, double priority) {
  FetchRequest r;
  r.key = key;
  r.chunk = chunk;
  r.page = page;
  r.generation = generation;
  r.demand = demand;
  r.priority = priority;
  const uint64_t begin =
      static_cast<uint64_t>(chunk) * geometry_.chunk_neurons * store_.record_bytes();
  r.src_offset = store_.ExpertOffset(key.layer, key.expert) + begin;
  r.bytes = static_cast<uint32_t>(
      AlignUp(static_cast<uint64_t>(geometry_.ChunkNeurons(chunk)) * store_.record_bytes(),
              kStoreAlignment));
  r.dst = arena_.data() + static_cast<size_t>(page) * static_cast<size_t>(geometry_.page_bytes);
  return r;
}

std::string HostTier::Verify(const FetchRequest& r) const {
  const uint64_t rec = store_.record_bytes();
  const int bn = static_cast<int>(store_.block_neurons());
  const int first = r.chunk * geometry_.chunk_neurons;
  const int end = first + geometry_.ChunkNeurons(r.chunk);
  for (int n = first; n < end; n += bn) {
    const int count = std::min(bn, store_.neurons() - n);
    const std::byte* p = r.dst + static_cast<size_t>(n - first) * rec;
    if (StoreChecksum(std::span(p, count * rec)) !=
        store_.BlockChecksum(r.key.layer, r.key.expert, n / bn)) {
      MarkExpertStoreCorrupt(store_.path(), "checksum mismatch");
      return "checksum mismatch in expert store " + store_.path() +
             ": the store is corrupt and will be rebuilt on the next start";
    }
  }
  return "";
}

void HostTier::Execute(std::vector<CacheCommand>& commands) {
  for (const CacheCommand& c : commands) {
    switch (c.kind) {
      case CacheCommand::kFetch:
        fetch_->Enqueue(Request(c.expert, c.chunk, c.page, c.generation, c.demand, c.priority));
        break;
      case CacheCommand::kRelease:
        fetch_->Release(c.page);
        break;
      case CacheCommand::kPromote:
        fetch_->Promote(c.expert);
        break;
      case CacheCommand::kReprioritize:
        fetch_->Reprioritize(c.expert, c.priority);
        break;
    }
  }
  commands.clear();
}

void HostTier::OnRequestBegin(const policy::RequestBeginEvent& e) {
  controller_->RequestBegin(e, &commands_);
  Execute(commands_);
}
void HostTier::OnIterationBegin(const policy::IterationBeginEvent& e) {
  controller_->IterationBegin(e, &commands_);
  Execute(commands_);
}
void HostTier::OnGate(const policy::GateEvent& e) {
  plan_layer_ = -1;
  plan_ = controller_->Gate(e, &commands_);
  plan_layer_ = e.layer;
  Execute(commands_);
}
std::vector<PlannedExpert> HostTier::TakePlan(int layer) {
  Check(plan_layer_ == layer, "the host tier did not see layer ", layer,
        "'s gate event: its transformer must emit events to the offload stack");
  plan_layer_ = -1;
  return std::move(plan_);
}
void HostTier::OnExpertDone(const policy::ExpertDoneEvent& e) {
  controller_->ExpertDone(e, &commands_);
  Execute(commands_);
}
void HostTier::OnIterationEnd() {
  controller_->IterationEnd(&commands_);
  Execute(commands_);
}
void HostTier::OnRequestEnd(const policy::RequestEndEvent& e) {
  controller_->RequestEnd(e, &commands_);
  Execute(commands_);
}
void HostTier::Abandon(const ExpertKey& key, bool drop) {
  controller_->Abandon(key, drop, &commands_);
  Execute(commands_);
}

bool HostTier::Landed(const ExpertKey& key) const {
  const ExpertCache& cache = controller_->cache();
  for (int c = 0; c < geometry_.chunks_per_expert(); ++c) {
    const int32_t page = cache.PageOf(key, c);
    if (page >= 0 && fetch_->State(page, cache.Generation(page), nullptr) != ChunkState::kLanded)
      return false;
  }
  return true;
}

int32_t HostTier::PageOf(const ExpertKey& key, int chunk) const {
  return controller_->cache().PageOf(key, chunk);
}

uint32_t HostTier::Generation(int32_t page) const {
  if (page >= geometry_.capacity_pages)
    return staging_gen_[static_cast<size_t>(page - geometry_.capacity_pages)];
  return controller_->cache().Generation(page);
}

const std::byte* HostTier::PageData(int32_t page) const {
  return arena_.data() + static_cast<size_t>(page) * static_cast<size_t>(geometry_.page_bytes);
}

ChunkState HostTier::State(int32_t page, uint32_t generation, std::string* error) const {
  return fetch_->State(page, generation, error);
}

uint32_t HostTier::StreamChunk(const ExpertKey& key, int chunk, int32_t staging_page) {
  uint32_t& gen = staging_gen_[static_cast<size_t>(staging_page - geometry_.capacity_pages)];
  ++gen;
  fetch_->Enqueue(Request(key, chunk, staging_page, gen, true, 0));
  return gen;
}

void HostTier::WaitForLanding(int layer, uint64_t seen) {
  Stopwatch watch;
  fetch_->WaitForCompletion(seen);
  stall_ms_[static_cast<size_t>(layer)] += watch.ElapsedMs();
}

void HostTier::InjectReadError(int64_t after) {
  storage_->InjectReadError(after);
}

OffloadMetrics HostTier::Metrics() const {
  OffloadMetrics m;
  m.policy = controller_->policy().name();
  m.policy_worker = policy::PolicyWorker::ModeName(controller_->worker().mode());
  m.policy_timing = controller_->Timing();
  m.predictions = controller_->predictions().ToJson();
  m.direct_io = storage_->direct();
  m.budget_bytes = options_.budget_bytes;
  m.capacity_bytes = geometry_.capacity_pages * geometry_.page_bytes;
  m.host_cache_bytes = controller_->cache().used_pages() * geometry_.page_bytes;
  m.peak_host_cache_bytes = controller_->cache().peak_used_pages() * geometry_.page_bytes;
  m.staging_bytes = staging_pages_ * geometry_.page_bytes;
  m.page_bytes = geometry_.page_bytes;
  m.chunk_neurons = geometry_.chunk_neurons;
  const FetchStats io = fetch_->Stats();
  const std::vector<LayerCounters> counters = controller_->Counters();
  for (int layer : store_.moe_layers()) {
    LayerOffloadMetrics l;
    l.layer = layer;
    l.counters = counters[static_cast<size_t>(layer)];
    l.bytes_read = io.bytes_per_layer[static_cast<size_t>(layer)];
    l.stall_ms = stall_ms_[static_cast<size_t>(layer)];
    m.total.counters.Add(l.counters);
    m.total.bytes_read += l.bytes_read;
    m.total.stall_ms += l.stall_ms;
    m.layers.push_back(l);
  }
  m.total.layer = -1;
  m.reads = io.reads;
  m.io_busy_ms = io.busy_ms;
  m.overlap_ms = std::max(0.0, io.busy_ms - m.total.stall_ms);
  return m;
}

}  // namespace moex::tiers

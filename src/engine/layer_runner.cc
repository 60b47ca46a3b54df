#include "engine/layer_runner.h"

#include <deque>
#include <vector>

#include "core/error.h"

namespace moex {

using policy::ExpertKey;
using tiers::CacheGeometry;
using tiers::ChunkState;
using tiers::HostTier;
using tiers::PlannedExpert;

namespace {

struct ExpertProgress {
  ExpertKey key;
  int next_chunk = 0;
  std::vector<int32_t> page;     // Per chunk: cache page, or -1 (streamed via staging).
  std::vector<int32_t> staging;  // Per chunk: staging page once issued, else -1.
  std::vector<uint32_t> gen;
  bool done = false;
};

}  // namespace

void RunOffloadedLayer(HostTier& tier, int layer, const ChunkComputeFn& compute) {
  const std::vector<PlannedExpert> plan = tier.TakePlan(layer);
  const CacheGeometry& g = tier.geometry();
  const int chunks = g.chunks_per_expert();
  std::vector<ExpertProgress> experts(plan.size());
  std::deque<std::pair<size_t, int>> stream_queue;  // (expert index, chunk), plan order.
  for (size_t i = 0; i < plan.size(); ++i) {
    ExpertProgress& p = experts[i];
    p.key = plan[i].key;
    p.page.resize(static_cast<size_t>(chunks));
    p.staging.assign(static_cast<size_t>(chunks), -1);
    p.gen.resize(static_cast<size_t>(chunks));
    for (int c = 0; c < chunks; ++c) {
      const int32_t page = tier.PageOf(p.key, c);
      p.page[static_cast<size_t>(c)] = page;
      if (page >= 0)
        p.gen[static_cast<size_t>(c)] = tier.Generation(page);
      else
        stream_queue.emplace_back(i, c);
    }
  }
  std::vector<int32_t> free_staging;
  for (int i = tier.num_staging_pages() - 1; i >= 0; --i)
    free_staging.push_back(tier.StagingPage(i));
  auto issue_streams = [&] {
    while (!stream_queue.empty() && !free_staging.empty()) {
      auto [i, c] = stream_queue.front();
      stream_queue.pop_front();
      const int32_t page = free_staging.back();
      free_staging.pop_back();
      experts[i].staging[static_cast<size_t>(c)] = page;
      experts[i].gen[static_cast<size_t>(c)] = tier.StreamChunk(experts[i].key, c, page);
    }
  };
  issue_streams();

  size_t remaining = experts.size();
  std::vector<ChunkTask> batch;
  std::vector<size_t> batch_owner;
  try {
    while (remaining > 0) {
      const uint64_t seen = tier.completions();
      batch.clear();
      batch_owner.clear();
      for (size_t i = 0; i < experts.size(); ++i) {
        ExpertProgress& p = experts[i];
        if (p.done) continue;
        const size_t c = static_cast<size_t>(p.next_chunk);
        const int32_t page = p.page[c] >= 0 ? p.page[c] : p.staging[c];
        if (page < 0) continue;  // Streamed chunk still waiting for a staging page.
        std::string error;
        const ChunkState state = tier.State(page, p.gen[c], &error);
        if (state == ChunkState::kFailed) {
          Fail("cannot load layer ", layer, " expert ", p.key.expert,
               " from the expert store: ", error);
        }
        if (state != ChunkState::kLanded) continue;
        ChunkTask t;
        t.expert = p.key.expert;
        t.neuron_begin = p.next_chunk * g.chunk_neurons;
        t.neuron_count = g.ChunkNeurons(p.next_chunk);
        t.records = tier.PageData(page);
        batch.push_back(t);
        batch_owner.push_back(i);
      }
      if (batch.empty()) {
        tier.WaitForLanding(layer, seen);
        continue;
      }
      compute(batch);
      for (size_t i : batch_owner) {
        ExpertProgress& p = experts[i];
        const size_t c = static_cast<size_t>(p.next_chunk);
        if (p.staging[c] >= 0) {
          free_staging.push_back(p.staging[c]);
          p.staging[c] = -1;
        }
        if (++p.next_chunk == chunks) {
          p.done = true;
          --remaining;
          tier.OnExpertDone({p.key.layer, p.key.expert});
        }
      }
      issue_streams();
    }
  } catch (const Error&) {
    // The failed expert (and any other not finished) is unpinned; the one whose chunk
    // failed is dropped so the next request reads it again.
    for (ExpertProgress& p : experts) {
      if (p.done) continue;
      bool failed = false;
      for (int c = 0; c < chunks; ++c) {
        const int32_t page = p.page[static_cast<size_t>(c)];
        if (page < 0) continue;
        failed |= tier.State(page, p.gen[static_cast<size_t>(c)], nullptr) == ChunkState::kFailed;
      }
      tier.Abandon(p.key, failed);
    }
    throw;
  }
}

}  // namespace moex

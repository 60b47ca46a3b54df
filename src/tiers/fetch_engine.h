// The fetch engine of one link: a priority queue of chunk transfers where demand beats
// prefetch (then higher priority, then first come), chunked so a demand waits for at most
// the chunks already in flight (prefetches may not fill the whole link), cancellation of
// queued work, and completion events the executor waits on. Runs the same way over any
// TransferLink (storage -> host now, host -> device later).
#pragma once

#include <algorithm>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/clock.h"
#include "core/mutex.h"
#include "policy/events.h"
#include "tiers/transfer_link.h"

namespace moex::tiers {

struct FetchRequest {
  policy::ExpertKey key;
  int chunk = 0;
  int32_t page = 0;  // Destination page id (cache page or staging page).
  uint32_t generation = 0;
  bool demand = false;
  double priority = 0;
  uint64_t src_offset = 0;
  std::byte* dst = nullptr;
  uint32_t bytes = 0;
};

enum class ChunkState { kPending, kLanded, kFailed };

struct FetchStats {
  std::vector<uint64_t> bytes_per_layer;
  uint64_t reads = 0;
  uint64_t dropped = 0;  // Queued transfers removed by Release.
  double busy_ms = 0;    // Wall time with at least one transfer in flight.
};

// Of `in_flight` reads, how many may be prefetches: a quarter is kept for demand, so a
// demand miss never waits behind a full window of speculation (the simulator's link model
// uses the same split).
inline int MaxPrefetchInFlight(int in_flight) {
  return std::max(1, in_flight * 3 / 4);
}

class FetchEngine {
 public:
  // Checks landed bytes; returns "" or what is wrong. Runs on the link's thread.
  using Verifier = std::function<std::string(const FetchRequest&)>;

  FetchEngine(std::unique_ptr<TransferLink> link, int num_pages, int num_layers,
              int max_prefetch_in_flight, Verifier verify);
  ~FetchEngine();

  void Enqueue(const FetchRequest& request) EXCLUDES(mutex_);
  // The page left its owner: queued transfers into it are dropped; in-flight ones drain
  // before any new transfer into the page starts.
  void Release(int32_t page) EXCLUDES(mutex_);
  // Queued transfers of `key` become demand transfers.
  void Promote(const policy::ExpertKey& key) EXCLUDES(mutex_);
  // Queued prefetch transfers of `key` take a new priority (demand ones keep theirs).
  void Reprioritize(const policy::ExpertKey& key, double priority) EXCLUDES(mutex_);

  ChunkState State(int32_t page, uint32_t generation, std::string* error) const EXCLUDES(mutex_);
  // Number of completions so far; WaitForCompletion blocks until it exceeds `seen`.
  uint64_t completions() const EXCLUDES(mutex_);
  uint64_t WaitForCompletion(uint64_t seen) EXCLUDES(mutex_);

  FetchStats Stats() const EXCLUDES(mutex_);
  TransferLink& link() { return *link_; }

 private:
  using QueueKey = std::tuple<int, double, uint64_t>;  // (!demand, -priority, seq).
  void Pump() REQUIRES(mutex_);
  // Re-queues the queued prefetch transfers of `key` as `demand` with `priority`, keeping
  // their order of arrival.
  void Requeue(const policy::ExpertKey& key, bool demand, const double* priority) REQUIRES(mutex_);
  void OnComplete(uint64_t tag, int result, const std::string& message) EXCLUDES(mutex_);

  std::unique_ptr<TransferLink> link_;
  Verifier verify_;
  int max_prefetch_;
  mutable Mutex mutex_;
  CondVar landed_;
  std::map<QueueKey, FetchRequest> queue_ GUARDED_BY(mutex_);
  std::map<uint64_t, FetchRequest> in_flight_ GUARDED_BY(mutex_);
  int prefetch_in_flight_ GUARDED_BY(mutex_) = 0;
  int verifying_ GUARDED_BY(mutex_) = 0;  // Reads done, checksums not yet checked.
  uint64_t seq_ GUARDED_BY(mutex_) = 0;
  std::vector<int> page_busy_ GUARDED_BY(mutex_);        // Transfers in flight per page.
  std::vector<uint32_t> landed_gen_ GUARDED_BY(mutex_);  // Last generation landed intact, per page.
  std::vector<uint32_t> failed_gen_ GUARDED_BY(mutex_);  // Last generation that failed, per page.
  std::vector<std::string> failure_ GUARDED_BY(mutex_);  // Its message.
  uint64_t completions_ GUARDED_BY(mutex_) = 0;
  FetchStats stats_ GUARDED_BY(mutex_);
  Clock::time_point busy_since_ GUARDED_BY(mutex_);
};

}  // namespace moex::tiers

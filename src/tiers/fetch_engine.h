// The fetch engine of one link: a priority queue of chunk transfers where demand beats
// prefetch (then higher priority, then first come), chunked so a demand waits for at most
// the chunks already in flight (prefetches may not fill the whole link), cancellation of
// queued work, and completion events the executor waits on. Runs the same way over any
// TransferLink (storage -> host now, host -> device later).
#pragma once

#include <algorithm>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/clock.h"
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

  void Enqueue(const FetchRequest& request);
  // The page left its owner: queued transfers into it are dropped; in-flight ones drain
  // before any new transfer into the page starts.
  void Release(int32_t page);
  // Queued transfers of `key` become demand transfers.
  void Promote(const policy::ExpertKey& key);
  // Queued prefetch transfers of `key` take a new priority (demand ones keep theirs).
  void Reprioritize(const policy::ExpertKey& key, double priority);

  ChunkState State(int32_t page, uint32_t generation, std::string* error) const;
  // Number of completions so far; WaitForCompletion blocks until it exceeds `seen`.
  uint64_t completions() const;
  uint64_t WaitForCompletion(uint64_t seen);

  FetchStats Stats() const;
  TransferLink& link() { return *link_; }

 private:
  using QueueKey = std::tuple<int, double, uint64_t>;  // (!demand, -priority, seq).
  void Pump();                                         // Requires mutex_.
  // Re-queues the queued prefetch transfers of `key` as `demand` with `priority`, keeping
  // their order of arrival. Requires mutex_.
  void Requeue(const policy::ExpertKey& key, bool demand, const double* priority);
  void OnComplete(uint64_t tag, int result, const std::string& message);

  std::unique_ptr<TransferLink> link_;
  Verifier verify_;
  int max_prefetch_;
  mutable std::mutex mutex_;
  std::condition_variable landed_;
  std::map<QueueKey, FetchRequest> queue_;
  std::map<uint64_t, FetchRequest> in_flight_;
  int prefetch_in_flight_ = 0;
  int verifying_ = 0;  // Reads done, checksums not yet checked.
  uint64_t seq_ = 0;
  std::vector<int> page_busy_;        // Transfers in flight per page.
  std::vector<uint32_t> landed_gen_;  // Last generation landed intact, per page.
  std::vector<uint32_t> failed_gen_;  // Last generation that failed, per page.
  std::vector<std::string> failure_;  // Its message.
  uint64_t completions_ = 0;
  FetchStats stats_;
  Clock::time_point busy_since_;
};

}  // namespace moex::tiers

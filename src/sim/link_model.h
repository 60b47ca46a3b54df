// A modelled transfer link with the fetch engine's queueing rules (demand beats prefetch,
// then higher priority, then first come; queued transfers can be dropped or promoted) and a
// fixed bandwidth, in simulated time. It executes the same CacheCommands the engine's
// FetchEngine executes, so modelled transfers follow the same decisions.
//
// Like the FetchEngine, the link keeps up to `in_flight` transfers submitted (at most
// `prefetch_in_flight` of them prefetches, and one per page). Submitted transfers share the
// bandwidth in submission order; they can no longer be dropped, promoted or re-prioritised,
// so a released page's read still costs its bytes, and a demand waits for what was
// submitted before it. in_flight = 1 is a serial link with nothing committed ahead.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tiers/expert_cache.h"

namespace moex::sim {

class LinkModel {
 public:
  LinkModel(double gb_per_s, double latency_us, int in_flight = 1);

  // Every call takes the current simulated time (ms, never decreasing); the link first runs
  // up to it, so queue decisions are made with what was queued at that moment.
  void Enqueue(const tiers::ExpertKey& key, int32_t page, uint32_t generation, int64_t bytes,
               bool demand, double priority, double now);
  void Release(int32_t page, double now);
  void Promote(const tiers::ExpertKey& key, double now);
  void Reprioritize(const tiers::ExpertKey& key, double priority, double now);
  void AdvanceTo(double t);

  bool Landed(int32_t page, uint32_t generation) const;
  // When the oldest transfer in flight completes; infinity when the link is idle.
  double NextCompletion() const;

  int64_t bytes_moved() const { return bytes_moved_; }
  int64_t demand_bytes() const { return demand_bytes_; }
  double busy_ms() const { return busy_ms_; }
  int64_t dropped() const { return dropped_; }
  // Bytes of transfers whose page was released while they were in flight.
  int64_t orphan_bytes() const { return orphan_bytes_; }

 private:
  struct Transfer {
    tiers::ExpertKey key;
    int32_t page = 0;
    uint32_t generation = 0;
    int64_t bytes = 0;
    bool demand = false;
    double priority = 0;
    uint64_t seq = 0;
  };
  struct InFlight {
    Transfer transfer;
    double end = 0;
    bool orphan = false;  // Its page was released after it was submitted.
  };
  using QueueKey = std::tuple<int, double, uint64_t>;  // (!demand, -priority, seq)
  // Submits queued transfers at time `at` while the FetchEngine's limits allow.
  void Submit(double at);
  // As FetchEngine::Requeue: queued prefetches of `key` move class and/or priority.
  void Requeue(const tiers::ExpertKey& key, bool demand, const double* priority);
  void Push(const Transfer& t);
  void Erase(const QueueKey& q);
  static uint64_t KeyIndex(const tiers::ExpertKey& k) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(k.layer)) << 32) |
           static_cast<uint32_t>(k.expert);
  }

  double ms_per_byte_;
  double latency_ms_;
  std::map<QueueKey, Transfer> queue_;
  // The queue's entries by page and by expert: releases and requeues touch only their own
  // transfers instead of scanning a queue that holds thousands of prefetched chunks.
  std::unordered_map<int32_t, std::vector<QueueKey>> by_page_;
  std::unordered_map<uint64_t, std::vector<QueueKey>> by_expert_;
  int max_in_flight_;
  int max_prefetch_in_flight_;
  std::deque<InFlight> in_flight_;  // In submission order, which is completion order.
  std::unordered_map<int32_t, int> page_busy_;
  int prefetch_in_flight_ = 0;
  double pipe_free_at_ = 0;  // When the last submitted transfer completes.
  double now_ = 0;
  uint64_t seq_ = 0;
  std::vector<int64_t> landed_;  // Per page: last generation landed, -1 = none.
  int64_t bytes_moved_ = 0;
  int64_t demand_bytes_ = 0;
  double busy_ms_ = 0;
  int64_t dropped_ = 0;
  int64_t orphan_bytes_ = 0;
};

}  // namespace moex::sim

// A modelled transfer link with the fetch engine's queueing rules (demand beats prefetch,
// then higher priority, then first come; queued transfers can be dropped or promoted) and a
// fixed bandwidth, in simulated time. It executes the same CacheCommands the engine's
// FetchEngine executes, so modelled transfers follow the same decisions.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tiers/expert_cache.h"

namespace moex::sim {

class LinkModel {
 public:
  LinkModel(double gb_per_s, double latency_us);

  // Every call takes the current simulated time (ms, never decreasing); the link first runs
  // up to it, so queue decisions are made with what was queued at that moment.
  void Enqueue(const tiers::ExpertKey& key, int32_t page, uint32_t generation, int64_t bytes,
               bool demand, double priority, double now);
  void Release(int32_t page, double now);
  void Promote(const tiers::ExpertKey& key, double now);
  void Reprioritize(const tiers::ExpertKey& key, double priority, double now);
  void AdvanceTo(double t);

  bool Landed(int32_t page, uint32_t generation) const;
  // When the transfer in flight completes; infinity when the link is idle.
  double NextCompletion() const;

  int64_t bytes_moved() const { return bytes_moved_; }
  int64_t demand_bytes() const { return demand_bytes_; }
  double busy_ms() const { return busy_ms_; }
  int64_t dropped() const { return dropped_; }

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
  using QueueKey = std::tuple<int, double, uint64_t>;  // (!demand, -priority, seq)
  void StartNext(double at);
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
  std::optional<Transfer> current_;
  double current_end_ = 0;
  double now_ = 0;
  uint64_t seq_ = 0;
  std::vector<int64_t> landed_;  // Per page: last generation landed, -1 = none.
  int64_t bytes_moved_ = 0;
  int64_t demand_bytes_ = 0;
  double busy_ms_ = 0;
  int64_t dropped_ = 0;
};

}  // namespace moex::sim

#include "sim/link_model.h"

#include <algorithm>

#include "core/error.h"
#include "tiers/fetch_engine.h"

namespace moex::sim {

LinkModel::LinkModel(double gb_per_s, double latency_us, int in_flight)
    : ms_per_byte_(1e3 / (gb_per_s * 1e9)),
      latency_ms_(latency_us / 1e3),
      max_in_flight_(in_flight),
      max_prefetch_in_flight_(tiers::MaxPrefetchInFlight(in_flight)) {
  Check(gb_per_s > 0, "link bandwidth must be positive");
  Check(in_flight >= 1, "link transfers in flight must be at least 1, not ", in_flight);
}

void LinkModel::Push(const Transfer& t) {
  const QueueKey q{t.demand ? 0 : 1, -t.priority, t.seq};
  queue_.emplace(q, t);
  by_page_[t.page].push_back(q);
  by_expert_[KeyIndex(t.key)].push_back(q);
}

void LinkModel::Erase(const QueueKey& q) {
  auto it = queue_.find(q);
  Check(it != queue_.end(), "link model: erasing a transfer that is not queued");
  auto drop = [&q](auto& index, auto key) {
    auto found = index.find(key);
    std::vector<QueueKey>& list = found->second;
    list.erase(std::find(list.begin(), list.end(), q));
    if (list.empty()) index.erase(found);
  };
  drop(by_page_, it->second.page);
  drop(by_expert_, KeyIndex(it->second.key));
  queue_.erase(it);
}

void LinkModel::Submit(double at) {
  while (static_cast<int>(in_flight_.size()) < max_in_flight_) {
    auto it = queue_.begin();
    for (; it != queue_.end(); ++it) {
      const Transfer& t = it->second;
      if (page_busy_.count(t.page)) continue;
      if (!t.demand && prefetch_in_flight_ >= max_prefetch_in_flight_) continue;
      break;
    }
    if (it == queue_.end()) return;
    const Transfer t = it->second;
    Erase(it->first);
    const double duration = latency_ms_ + static_cast<double>(t.bytes) * ms_per_byte_;
    const double end = std::max(at, pipe_free_at_) + duration;
    pipe_free_at_ = end;
    busy_ms_ += duration;
    ++page_busy_[t.page];
    if (!t.demand) ++prefetch_in_flight_;
    in_flight_.push_back(InFlight{t, end, false});
  }
}

void LinkModel::AdvanceTo(double t) {
  Check(t + 1e-9 >= now_, "link model: time went backwards");
  while (!in_flight_.empty() && in_flight_.front().end <= t) {
    const InFlight done = in_flight_.front();
    in_flight_.pop_front();
    const Transfer& d = done.transfer;
    // An orphan lands its old generation, which no reader asks for (as in the engine).
    landed_[static_cast<size_t>(d.page)] = d.generation;
    bytes_moved_ += d.bytes;
    if (d.demand) demand_bytes_ += d.bytes;
    if (done.orphan) orphan_bytes_ += d.bytes;
    if (--page_busy_[d.page] == 0) page_busy_.erase(d.page);
    if (!d.demand) --prefetch_in_flight_;
    Submit(done.end);
  }
  now_ = std::max(now_, t);
}

void LinkModel::Enqueue(const tiers::ExpertKey& key, int32_t page, uint32_t generation,
                        int64_t bytes, bool demand, double priority, double now) {
  AdvanceTo(now);
  Check(page >= 0, "link model: negative page ", page);
  if (static_cast<size_t>(page) >= landed_.size())
    landed_.resize(static_cast<size_t>(page) + 1, -1);
  const uint64_t seq = seq_++;
  Push(Transfer{key, page, generation, bytes, demand, priority, seq});
  Submit(now_);
}

void LinkModel::Release(int32_t page, double now) {
  AdvanceTo(now);
  for (InFlight& f : in_flight_)
    if (f.transfer.page == page) f.orphan = true;
  auto found = by_page_.find(page);
  if (found == by_page_.end()) return;
  const std::vector<QueueKey> queued = found->second;
  for (const QueueKey& q : queued) Erase(q);
  dropped_ += static_cast<int64_t>(queued.size());
}

void LinkModel::Requeue(const tiers::ExpertKey& key, bool demand, const double* priority) {
  auto found = by_expert_.find(KeyIndex(key));
  if (found == by_expert_.end()) return;
  std::vector<QueueKey> keys;
  for (const QueueKey& q : found->second)
    if (std::get<0>(q) == 1) keys.push_back(q);  // Prefetches only.
  std::sort(keys.begin(), keys.end());           // Queue order.
  std::vector<Transfer> moved;
  for (const QueueKey& q : keys) {
    moved.push_back(queue_.at(q));
    Erase(q);
  }
  // They keep their order within the new class, as in the FetchEngine.
  for (Transfer& t : moved) {
    t.demand = demand;
    if (priority) t.priority = *priority;
    Push(t);
  }
}

void LinkModel::Promote(const tiers::ExpertKey& key, double now) {
  AdvanceTo(now);
  Requeue(key, true, nullptr);
  Submit(now_);
}

void LinkModel::Reprioritize(const tiers::ExpertKey& key, double priority, double now) {
  AdvanceTo(now);
  Requeue(key, false, &priority);
  Submit(now_);
}

bool LinkModel::Landed(int32_t page, uint32_t generation) const {
  return static_cast<size_t>(page) < landed_.size() &&
         landed_[static_cast<size_t>(page)] == static_cast<int64_t>(generation);
}

double LinkModel::NextCompletion() const {
  return in_flight_.empty() ? std::numeric_limits<double>::infinity() : in_flight_.front().end;
}

}  // namespace moex::sim

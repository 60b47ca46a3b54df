#include "sim/link_model.h"

#include <algorithm>

#include "core/error.h"

namespace moex::sim {

LinkModel::LinkModel(double gb_per_s, double latency_us)
    : ms_per_byte_(1e3 / (gb_per_s * 1e9)), latency_ms_(latency_us / 1e3) {
  Check(gb_per_s > 0, "link bandwidth must be positive");
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

void LinkModel::StartNext(double at) {
  if (queue_.empty()) return;
  current_ = queue_.begin()->second;
  Erase(queue_.begin()->first);
  const double duration = latency_ms_ + static_cast<double>(current_->bytes) * ms_per_byte_;
  current_end_ = at + duration;
  busy_ms_ += duration;
}

void LinkModel::AdvanceTo(double t) {
  Check(t + 1e-9 >= now_, "link model: time went backwards");
  while (current_ && current_end_ <= t) {
    landed_[static_cast<size_t>(current_->page)] = current_->generation;
    bytes_moved_ += current_->bytes;
    if (current_->demand) demand_bytes_ += current_->bytes;
    current_.reset();
    StartNext(current_end_);
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
  if (!current_) StartNext(now_);
}

void LinkModel::Release(int32_t page, double now) {
  AdvanceTo(now);
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
}

void LinkModel::Reprioritize(const tiers::ExpertKey& key, double priority, double now) {
  AdvanceTo(now);
  Requeue(key, false, &priority);
}

bool LinkModel::Landed(int32_t page, uint32_t generation) const {
  return static_cast<size_t>(page) < landed_.size() &&
         landed_[static_cast<size_t>(page)] == static_cast<int64_t>(generation);
}

double LinkModel::NextCompletion() const {
  return current_ ? current_end_ : std::numeric_limits<double>::infinity();
}

}  // namespace moex::sim

#include "tiers/fetch_engine.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace moex::tiers {

FetchEngine::FetchEngine(std::unique_ptr<TransferLink> link, int num_pages, int num_layers,
                         int max_prefetch_in_flight, Verifier verify)
    : link_(std::move(link)), verify_(std::move(verify)), max_prefetch_(max_prefetch_in_flight) {
  Check(max_prefetch_ >= 0 && max_prefetch_ < link_->max_in_flight(),
        "fetch engine: prefetches must leave room for demand on the link");
  page_busy_.assign(static_cast<size_t>(num_pages), 0);
  landed_gen_.assign(static_cast<size_t>(num_pages), 0);
  failed_gen_.assign(static_cast<size_t>(num_pages), 0);
  failure_.resize(static_cast<size_t>(num_pages));
  stats_.bytes_per_layer.assign(static_cast<size_t>(num_layers), 0);
  link_->SetOnComplete([this](uint64_t tag, int result, const std::string& message) {
    OnComplete(tag, result, message);
  });
}

FetchEngine::~FetchEngine() {
  MutexLock lock(&mutex_);
  queue_.clear();
  while (!in_flight_.empty() || verifying_ != 0) landed_.Wait(lock);
  lock.Unlock();
  link_.reset();  // Joins the link's thread before our members go.
}

void FetchEngine::Enqueue(const FetchRequest& r) {
  MutexLock lock(&mutex_);
  queue_.emplace(QueueKey{r.demand ? 0 : 1, -r.priority, seq_++}, r);
  Pump();
}

void FetchEngine::Release(int32_t page) {
  MutexLock lock(&mutex_);
  stats_.dropped += std::erase_if(queue_, [&](const auto& kv) { return kv.second.page == page; });
}

void FetchEngine::Requeue(const policy::ExpertKey& key, bool demand, const double* priority) {
  std::vector<std::pair<QueueKey, FetchRequest>> moved;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->second.key == key && !it->second.demand) {
      moved.emplace_back(it->first, it->second);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  // Keep their relative order (sequence numbers) within the new class.
  for (auto& [k, r] : moved) {
    r.demand = demand;
    if (priority) r.priority = *priority;
    queue_.emplace(QueueKey{demand ? 0 : 1, -r.priority, std::get<2>(k)}, r);
  }
}

void FetchEngine::Promote(const policy::ExpertKey& key) {
  MutexLock lock(&mutex_);
  Requeue(key, true, nullptr);
  Pump();
}

void FetchEngine::Reprioritize(const policy::ExpertKey& key, double priority) {
  MutexLock lock(&mutex_);
  Requeue(key, false, &priority);
  Pump();
}

void FetchEngine::Pump() {
  const int cap = link_->max_in_flight();
  while (static_cast<int>(in_flight_.size()) < cap) {
    auto it = queue_.begin();
    for (; it != queue_.end(); ++it) {
      const FetchRequest& r = it->second;
      if (page_busy_[static_cast<size_t>(r.page)] > 0) continue;
      if (!r.demand && prefetch_in_flight_ >= max_prefetch_) continue;
      break;
    }
    if (it == queue_.end()) return;
    const FetchRequest r = it->second;
    const uint64_t tag = std::get<2>(it->first);
    queue_.erase(it);
    if (in_flight_.empty()) busy_since_ = Clock::now();
    in_flight_.emplace(tag, r);
    ++page_busy_[static_cast<size_t>(r.page)];
    if (!r.demand) ++prefetch_in_flight_;
    link_->Submit({tag, r.src_offset, r.dst, r.bytes});
  }
}

void FetchEngine::OnComplete(uint64_t tag, int result, const std::string& message) {
  FetchRequest r;
  {
    // The link slot frees at once, so the next read starts while this one is verified; the
    // page stays busy (and unlanded) until verification is done.
    MutexLock lock(&mutex_);
    r = in_flight_.at(tag);
    in_flight_.erase(tag);
    if (!r.demand) --prefetch_in_flight_;
    ++verifying_;
    if (in_flight_.empty()) stats_.busy_ms += MillisSince(busy_since_);
    Pump();
  }
  std::string error = message;
  if (result >= 0 && static_cast<uint32_t>(result) != r.bytes)
    error = "short read (" + std::to_string(result) + " of " + std::to_string(r.bytes) +
            " bytes): the store is truncated";
  if (error.empty() && verify_) error = verify_(r);  // Outside the lock: it hashes the chunk.

  MutexLock lock(&mutex_);
  --verifying_;
  --page_busy_[static_cast<size_t>(r.page)];
  const size_t p = static_cast<size_t>(r.page);
  if (error.empty()) {
    landed_gen_[p] = r.generation;
    stats_.bytes_per_layer[static_cast<size_t>(r.key.layer)] += r.bytes;
    ++stats_.reads;
  } else {
    failed_gen_[p] = r.generation;
    failure_[p] = "layer " + std::to_string(r.key.layer) + " expert " +
                  std::to_string(r.key.expert) + " chunk " + std::to_string(r.chunk) + ": " + error;
  }
  ++completions_;
  Pump();
  landed_.NotifyAll();
}

ChunkState FetchEngine::State(int32_t page, uint32_t generation, std::string* error) const {
  MutexLock lock(&mutex_);
  const size_t p = static_cast<size_t>(page);
  if (landed_gen_[p] == generation) return ChunkState::kLanded;
  if (failed_gen_[p] == generation) {
    if (error) *error = failure_[p];
    return ChunkState::kFailed;
  }
  return ChunkState::kPending;
}

uint64_t FetchEngine::completions() const {
  MutexLock lock(&mutex_);
  return completions_;
}

uint64_t FetchEngine::WaitForCompletion(uint64_t seen) {
  MutexLock lock(&mutex_);
  while (completions_ <= seen) landed_.Wait(lock);
  return completions_;
}

FetchStats FetchEngine::Stats() const {
  MutexLock lock(&mutex_);
  FetchStats s = stats_;
  if (!in_flight_.empty()) s.busy_ms += MillisSince(busy_since_);
  return s;
}

}  // namespace moex::tiers

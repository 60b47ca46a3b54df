#include "tiers/expert_cache.h"

#include <algorithm>

#include "core/error.h"

namespace moex::tiers {

ExpertCache::ExpertCache(const CacheGeometry& g) : g_(g) {
  Check(g.num_layers > 0 && g.num_experts > 0 && g.neurons > 0 && g.chunk_neurons > 0 &&
            g.capacity_pages >= 0,
        "expert cache: invalid geometry");
  entries_.resize(static_cast<size_t>(g.num_layers) * static_cast<size_t>(g.num_experts));
  for (auto& e : entries_) e.pages.assign(static_cast<size_t>(g.chunks_per_expert()), -1);
  wasted_.assign(static_cast<size_t>(g.num_layers), 0);
  evictions_ = wasted_;
  generation_.assign(static_cast<size_t>(g.capacity_pages), 0);
  for (int64_t p = 0; p < g.capacity_pages; ++p) free_.push(static_cast<int32_t>(p));
}

void ExpertCache::FreeAll(size_t index, std::vector<CacheCommand>* out) {
  Entry& e = entries_[index];
  for (int32_t& page : e.pages) {
    if (page < 0) continue;
    CacheCommand c;
    c.kind = CacheCommand::kRelease;
    c.expert = KeyOf(index);
    c.page = page;
    out->push_back(c);
    free_.push(page);
    page = -1;
  }
  e.present = 0;
  if (e.unused_prefetch) ++wasted_[index / static_cast<size_t>(g_.num_experts)];
  e.unused_prefetch = false;
}

bool ExpertCache::Insert(const ExpertKey& key, NeuronRange range, bool demand, double priority,
                         const Scorer& scorer, std::vector<CacheCommand>* out) {
  const size_t index = Index(key);
  Entry& entry = entries_[index];
  const int end = range.end < 0 ? g_.neurons : std::min(range.end, g_.neurons);
  const int first = std::max(0, range.begin) / g_.chunk_neurons;
  const int last = (end + g_.chunk_neurons - 1) / g_.chunk_neurons;  // Exclusive.
  int missing = 0;
  for (int c = first; c < last; ++c) missing += entry.pages[static_cast<size_t>(c)] < 0;
  if (missing == 0) return true;

  // Choose victims before changing anything, so a failed insert leaves no trace.
  const int64_t need = missing - static_cast<int64_t>(free_.size());
  if (need > 0) {
    std::vector<std::pair<double, size_t>> candidates;
    int64_t available = 0;
    std::erase_if(holders_, [&](size_t i) { return entries_[i].present == 0; });
    std::sort(holders_.begin(), holders_.end());
    holders_.erase(std::unique(holders_.begin(), holders_.end()), holders_.end());
    for (size_t i : holders_) {
      const Entry& e = entries_[i];
      if (i == index || e.pins > 0) continue;
      candidates.push_back({scorer(KeyOf(i)), i});
      available += e.present;
    }
    if (available < need) return false;
    std::sort(candidates.begin(), candidates.end());
    int64_t freed = 0;
    for (const auto& [score, i] : candidates) {
      if (freed >= need) break;
      freed += entries_[i].present;
      FreeAll(i, out);
      ++evictions_[i / static_cast<size_t>(g_.num_experts)];
    }
  }
  if (entry.present == 0) holders_.push_back(index);
  for (int c = first; c < last; ++c) {
    int32_t& page = entry.pages[static_cast<size_t>(c)];
    if (page >= 0) continue;
    page = free_.top();
    free_.pop();
    ++entry.present;
    CacheCommand cmd;
    cmd.kind = CacheCommand::kFetch;
    cmd.expert = key;
    cmd.chunk = c;
    cmd.page = page;
    cmd.generation = ++generation_[static_cast<size_t>(page)];
    cmd.demand = demand;
    cmd.priority = priority;
    out->push_back(cmd);
  }
  peak_used_ = std::max(peak_used_, used_pages());
  return true;
}

void ExpertCache::Remove(const ExpertKey& key, std::vector<CacheCommand>* out) {
  const size_t index = Index(key);
  Check(entries_[index].pins == 0, "expert cache: removing a pinned expert");
  FreeAll(index, out);
}

void ExpertCache::Pin(const ExpertKey& key) {
  ++entries_[Index(key)].pins;
}

void ExpertCache::Unpin(const ExpertKey& key) {
  Entry& e = entries_[Index(key)];
  Check(e.pins > 0, "expert cache: unpinning an expert that is not pinned");
  --e.pins;
}

bool ExpertCache::Present(const ExpertKey& key) const {
  return entries_[Index(key)].present == g_.chunks_per_expert();
}

int ExpertCache::PresentChunks(const ExpertKey& key) const {
  return entries_[Index(key)].present;
}

int32_t ExpertCache::PageOf(const ExpertKey& key, int chunk) const {
  return entries_[Index(key)].pages[static_cast<size_t>(chunk)];
}

void ExpertCache::MarkPrefetched(const ExpertKey& key) {
  entries_[Index(key)].unused_prefetch = true;
}

bool ExpertCache::TakeUnused(const ExpertKey& key) {
  Entry& e = entries_[Index(key)];
  const bool was = e.unused_prefetch;
  e.unused_prefetch = false;
  return was;
}

bool ExpertCache::Unused(const ExpertKey& key) const {
  return entries_[Index(key)].unused_prefetch;
}

}  // namespace moex::tiers

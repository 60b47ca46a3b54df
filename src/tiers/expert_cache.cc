#include "tiers/expert_cache.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "core/error.h"

namespace moex::tiers {

ExpertCache::ExpertCache(const CacheGeometry& g) : g_(g) {
  Check(g.num_layers > 0 && g.num_experts > 0 && g.neurons > 0 && g.chunk_neurons > 0 &&
            g.capacity_pages >= 0,
        "expert cache: invalid geometry");
  entries_.resize(static_cast<size_t>(g.num_layers) * static_cast<size_t>(g.num_experts));
  for (auto& e : entries_) e.pages.assign(static_cast<size_t>(g.chunks_per_expert()), -1);
  const size_t layers = static_cast<size_t>(g.num_layers);
  wasted_.assign(layers, 0);
  wasted_chunks_ = evictions_ = used_per_layer_ = peak_per_layer_ = wasted_;
  layer_budget_.assign(layers, -1);
  generation_.assign(static_cast<size_t>(g.capacity_pages), 0);
  for (int64_t p = 0; p < g.capacity_pages; ++p) free_.push(static_cast<int32_t>(p));
}

std::pair<int, int> ExpertCache::ChunksOf(NeuronRange range) const {
  const int end = range.end < 0 ? g_.neurons : std::min(range.end, g_.neurons);
  const int begin = std::clamp(range.begin, 0, g_.neurons);
  if (begin >= end) return {0, 0};
  return {begin / g_.chunk_neurons, (end + g_.chunk_neurons - 1) / g_.chunk_neurons};
}

void ExpertCache::FreeChunk(size_t index, int chunk, std::vector<CacheCommand>* out) {
  Entry& e = entries_[index];
  int32_t& page = e.pages[static_cast<size_t>(chunk)];
  if (page < 0) return;
  CacheCommand c;
  c.kind = CacheCommand::kRelease;
  c.expert = KeyOf(index);
  c.chunk = chunk;
  c.page = page;
  out->push_back(c);
  free_.push(page);
  page = -1;
  --e.present;
  --used_per_layer_[static_cast<size_t>(LayerOf(index))];
  if (e.unused_prefetch) ++wasted_chunks_[static_cast<size_t>(LayerOf(index))];
}

void ExpertCache::FreeAll(size_t index, std::vector<CacheCommand>* out) {
  Entry& e = entries_[index];
  for (int c = 0; c < g_.chunks_per_expert(); ++c) FreeChunk(index, c, out);
  if (e.unused_prefetch) ++wasted_[static_cast<size_t>(LayerOf(index))];
  e.unused_prefetch = false;
}

void ExpertCache::SortHolders() {
  std::erase_if(holders_, [&](size_t i) { return entries_[i].present == 0; });
  // Holders stay sorted but for the few added since the last call: merge those in.
  const auto tail = std::is_sorted_until(holders_.begin(), holders_.end());
  std::sort(tail, holders_.end());
  std::inplace_merge(holders_.begin(), tail, holders_.end());
  holders_.erase(std::unique(holders_.begin(), holders_.end()), holders_.end());
}

int ExpertCache::MissingChunks(size_t index, NeuronRange range) const {
  const auto [first, last] = ChunksOf(range);
  int missing = 0;
  for (int c = first; c < last; ++c) missing += entries_[index].pages[static_cast<size_t>(c)] < 0;
  return missing;
}

bool ExpertCache::MakeRoom(size_t keep, int layer, int64_t layer_need, int64_t global_need,
                           const Scorer& scorer, std::vector<CacheCommand>* out,
                           const Admission& admit) {
  if (layer_need <= 0 && global_need <= 0) return true;
  // Every candidate is scored once, in ascending key order, before anything changes.
  SortHolders();
  std::vector<std::pair<double, size_t>> candidates;
  int64_t available = 0, available_in_layer = 0;
  for (size_t i : holders_) {
    const Entry& e = entries_[i];
    if (i == keep || !e.evictable()) continue;
    candidates.push_back({scorer(KeyOf(i)), i});
    available += e.present;
    if (LayerOf(i) == layer) available_in_layer += e.present;
  }
  if (available < global_need || available_in_layer < layer_need) return false;
  if (admit) {  // Against what it would evict: its layer's experts when the layer's budget binds.
    double lowest = std::numeric_limits<double>::infinity();
    for (const auto& [score, i] : candidates)
      if (layer_need <= 0 || LayerOf(i) == layer) lowest = std::min(lowest, score);
    if (!admit(lowest)) return false;
  }
  auto evict = [&](size_t i) {
    FreeAll(i, out);
    ++evictions_[static_cast<size_t>(LayerOf(i))];
  };
  if (layer_need <= 0) {
    // The usual case: the lowest scores until enough is free, taken from a heap so that a
    // large cache is not sorted whole for each eviction (same victims, same order).
    auto above = std::greater<std::pair<double, size_t>>();
    std::make_heap(candidates.begin(), candidates.end(), above);
    int64_t freed = 0;
    for (auto end = candidates.end(); freed < global_need; --end) {
      std::pop_heap(candidates.begin(), end, above);
      const size_t i = (end - 1)->second;
      freed += entries_[i].present;
      evict(i);
    }
    return true;
  }
  std::sort(candidates.begin(), candidates.end());
  std::vector<char> chosen(candidates.size(), 0);
  int64_t freed = 0, freed_in_layer = 0;
  // The layer's own budget first (only its experts can make room under it), then the cache's.
  for (size_t c = 0; c < candidates.size() && freed_in_layer < layer_need; ++c) {
    const size_t i = candidates[c].second;
    if (LayerOf(i) != layer) continue;
    chosen[c] = 1;
    freed += entries_[i].present;
    freed_in_layer += entries_[i].present;
  }
  for (size_t c = 0; c < candidates.size() && freed < global_need; ++c) {
    if (chosen[c]) continue;
    chosen[c] = 1;
    freed += entries_[candidates[c].second].present;
  }
  for (size_t c = 0; c < candidates.size(); ++c)
    if (chosen[c]) evict(candidates[c].second);
  return true;
}

bool ExpertCache::Insert(const ExpertKey& key, NeuronRange range, bool demand, double priority,
                         const Scorer& scorer, std::vector<CacheCommand>* out,
                         const Admission& admit) {
  const size_t index = Index(key);
  Entry& entry = entries_[index];
  const auto [first, last] = ChunksOf(range);
  const int missing = MissingChunks(index, range);
  if (missing == 0) return true;

  // Choose victims before changing anything, so a failed insert leaves no trace.
  const size_t l = static_cast<size_t>(key.layer);
  const int64_t budget = layer_budget_[l];
  if (budget >= 0 && missing > budget) return false;
  const int64_t layer_need = budget >= 0 ? used_per_layer_[l] + missing - budget : 0;
  if (!MakeRoom(index, key.layer, layer_need, missing - static_cast<int64_t>(free_.size()), scorer,
                out, admit))
    return false;
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
  used_per_layer_[l] += missing;
  Check(budget < 0 || used_per_layer_[l] <= budget, "expert cache: layer ", key.layer, " holds ",
        used_per_layer_[l], " pages over its budget of ", budget);
  peak_per_layer_[l] = std::max(peak_per_layer_[l], used_per_layer_[l]);
  peak_used_ = std::max(peak_used_, used_pages());
  return true;
}

void ExpertCache::Remove(const ExpertKey& key, std::vector<CacheCommand>* out) {
  const size_t index = Index(key);
  Check(entries_[index].pins == 0, "expert cache: removing a pinned expert");
  FreeAll(index, out);
}

bool ExpertCache::Retain(const ExpertKey& key, NeuronRange range, std::vector<CacheCommand>* out) {
  const size_t index = Index(key);
  if (entries_[index].pins > 0) return false;
  const auto [first, last] = ChunksOf(range);
  for (int c = 0; c < g_.chunks_per_expert(); ++c)
    if (c < first || c >= last) FreeChunk(index, c, out);
  if (entries_[index].present == 0) FreeAll(index, out);  // Settles the prefetch bookkeeping.
  return true;
}

void ExpertCache::Pin(const ExpertKey& key) {
  ++entries_[Index(key)].pins;
}

void ExpertCache::Unpin(const ExpertKey& key) {
  Entry& e = entries_[Index(key)];
  Check(e.pins > 0, "expert cache: unpinning an expert that is not pinned");
  --e.pins;
}

bool ExpertCache::Pinned(const ExpertKey& key) const {
  return !entries_[Index(key)].evictable();
}

void ExpertCache::PolicyPin(const ExpertKey& key, bool pinned) {
  entries_[Index(key)].policy_pinned = pinned;
}

bool ExpertCache::SetLayerBudgets(const std::vector<int64_t>& pages, const Scorer& scorer,
                                  std::vector<CacheCommand>* out) {
  if (pages.empty()) {
    layer_budget_.assign(static_cast<size_t>(g_.num_layers), -1);
    return true;
  }
  Check(pages.size() == static_cast<size_t>(g_.num_layers), "expert cache: ", pages.size(),
        " layer budgets for ", g_.num_layers, " layers");
  int64_t sum = 0;
  for (int64_t p : pages) sum += std::max<int64_t>(p, 0);
  if (sum > g_.capacity_pages) return false;
  // Feasible only if every layer over its new budget can drop enough unpinned pages.
  std::vector<int64_t> evictable(pages.size(), 0);
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].evictable()) evictable[static_cast<size_t>(LayerOf(i))] += entries_[i].present;
  for (size_t l = 0; l < pages.size(); ++l)
    if (pages[l] >= 0 && used_per_layer_[l] - pages[l] > evictable[l]) return false;
  for (size_t l = 0; l < pages.size(); ++l) {
    if (pages[l] < 0 || used_per_layer_[l] <= pages[l]) continue;
    const bool done = MakeRoom(entries_.size(), static_cast<int>(l), used_per_layer_[l] - pages[l],
                               0, scorer, out);
    Check(done, "expert cache: a feasible layer budget could not be met");
  }
  layer_budget_ = pages;
  return true;
}

int64_t ExpertCache::layer_budget(int layer) const {
  return layer_budget_[static_cast<size_t>(layer)];
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

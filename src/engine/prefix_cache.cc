#include "engine/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace moex {

size_t PrefixCache::KeyHash::operator()(const Key& key) const {
  // FNV-1a over the parent's address, the rotation and the tokens; equality decides.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(reinterpret_cast<uintptr_t>(key.parent));
  mix(key.long_rotation ? 1 : 0);
  for (int32_t t : key.tokens) mix(static_cast<uint32_t>(t));
  return static_cast<size_t>(h);
}

PrefixCache::PrefixCache(const ModelConfig& config, int64_t budget_bytes, int64_t block_tokens)
    : budget_(config.HasRecurrentLayers() ? 0 : budget_bytes), block_tokens_(block_tokens) {
  Check(budget_bytes >= 0, "prefix cache budget must not be negative");
  Check(block_tokens >= 1, "prefix cache blocks need at least one token");
  const KvCache probe(config, 1);
  row_size_ = probe.row_size();
  has_values_ = !config.mla;
  num_layers_ = config.num_layers;
  block_bytes_ = static_cast<int64_t>(KvCache::BytesPerToken(config)) * block_tokens_;
}

PrefixCache::~PrefixCache() = default;

PrefixCache::Block* PrefixCache::Find(Block* parent, bool long_rotation,
                                      std::span<const int32_t> tokens) {
  const Key key{parent, long_rotation, std::vector<int32_t>(tokens.begin(), tokens.end())};
  auto it = blocks_.find(key);
  return it == blocks_.end() ? nullptr : it->second.get();
}

void PrefixCache::Touch(const std::vector<Block*>& chain) {
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    lru_.splice(lru_.begin(), lru_, (*it)->lru);
}

int64_t PrefixCache::Restore(std::span<const int32_t> tokens, int64_t limit, bool long_rotation,
                             KvCache* cache) {
  Check(cache->length() == 0, "a prefix is restored into an empty KV cache");
  if (!enabled()) return 0;
  ++stats_.lookups;
  const int64_t B = block_tokens_;
  limit = std::min({limit, static_cast<int64_t>(tokens.size()), cache->capacity()});
  std::vector<Block*> chain;
  Block* parent = nullptr;
  for (int64_t start = 0; start + B <= limit; start += B) {
    Block* block = Find(parent, long_rotation, tokens.subspan(static_cast<size_t>(start), B));
    if (block == nullptr) break;
    chain.push_back(block);
    parent = block;
  }
  if (chain.empty()) return 0;
  const size_t run = static_cast<size_t>(B * row_size_);  // Floats of one block's K (or V).
  for (int layer = 0; layer < num_layers_; ++layer) {
    for (size_t j = 0; j < chain.size(); ++j) {
      const float* rows = chain[j]->rows.data() + layer * run * (has_values_ ? 2 : 1);
      std::memcpy(cache->keys(layer) + j * run, rows, run * sizeof(float));
      if (has_values_)
        std::memcpy(cache->values(layer) + j * run, rows + run, run * sizeof(float));
    }
  }
  const int64_t reused = static_cast<int64_t>(chain.size()) * B;
  cache->Advance(reused);
  Touch(chain);
  ++stats_.hits;
  stats_.tokens_reused += reused;
  return reused;
}

void PrefixCache::Store(std::span<const int32_t> tokens, const KvCache& cache,
                        const std::function<bool(int64_t)>& long_rotation) {
  if (!enabled() || block_bytes_ > budget_) return;
  Check(static_cast<int64_t>(tokens.size()) >= cache.length(),
        "prefix cache: fewer tokens than cached rows");
  const int64_t B = block_tokens_;
  const size_t run = static_cast<size_t>(B * row_size_);
  std::vector<Block*> chain;
  Block* parent = nullptr;
  for (int64_t start = 0; start + B <= cache.length(); start += B) {
    const bool rotation = long_rotation && long_rotation(start);
    bool uniform = true;
    for (int64_t p = start + 1; long_rotation && p < start + B && uniform; ++p)
      uniform = long_rotation(p) == rotation;
    if (!uniform) break;
    const auto span = tokens.subspan(static_cast<size_t>(start), B);
    Block* block = Find(parent, rotation, span);
    if (block == nullptr) {
      auto fresh = std::make_unique<Block>();
      fresh->rows.resize(run * (has_values_ ? 2 : 1) * static_cast<size_t>(num_layers_));
      const size_t offset = static_cast<size_t>(start * row_size_);
      for (int layer = 0; layer < num_layers_; ++layer) {
        float* rows = fresh->rows.data() + layer * run * (has_values_ ? 2 : 1);
        std::memcpy(rows, cache.keys(layer) + offset, run * sizeof(float));
        if (has_values_) std::memcpy(rows + run, cache.values(layer) + offset, run * sizeof(float));
      }
      block = fresh.get();
      auto [it, inserted] = blocks_.emplace(
          Key{parent, rotation, std::vector<int32_t>(span.begin(), span.end())}, std::move(fresh));
      block->key = &it->first;
      block->lru = lru_.insert(lru_.begin(), block);
      if (parent != nullptr) ++parent->children;
      stats_.bytes += block_bytes_;
      ++stats_.blocks;
    }
    chain.push_back(block);
    parent = block;
  }
  Touch(chain);
  EvictToBudget();
}

void PrefixCache::EvictToBudget() {
  while (stats_.bytes > budget_ && !lru_.empty()) {
    // The least recent block is a leaf (Touch keeps parents ahead of their children); the
    // scan is only a safeguard.
    auto victim = std::prev(lru_.end());
    while ((*victim)->children > 0 && victim != lru_.begin()) --victim;
    Block* block = *victim;
    if (block->children > 0) return;  // Unreachable: some block is always a leaf.
    if (block->key->parent != nullptr) --block->key->parent->children;
    lru_.erase(victim);
    blocks_.erase(blocks_.find(*block->key));  // Destroys `block` and its key.
    stats_.bytes -= block_bytes_;
    --stats_.blocks;
    ++stats_.evicted;
  }
}

}  // namespace moex

// Automatic prefix caching (vLLM's, over blocks of tokens): the KV rows that earlier requests
// computed for whole blocks of `block_tokens` tokens are kept, under a byte budget, in a tree
// keyed by the exact tokens of each block and of every block before it. A request whose
// tokens start with cached blocks copies their rows into its own KvCache instead of
// computing them again: multi-turn chats (each turn re-sends the conversation) and prompts
// sharing a system prompt skip most of their prefill.
//
// Lossless: a KV row depends only on the tokens up to its position (the kernels are batch-
// and chunk-invariant, docs/serving.md), blocks are matched on their tokens exactly (no hash
// is trusted), and a stored block is immutable (a request gets a copy, never a shared row).
// LongRoPE rotates a prefill by the whole prompt's length, so each block also records
// whether its rows were rotated with the long set, and only matches a request that would
// rotate them the same way. Every attention kind caches one row per position (GQA's K and
// V, MLA's latent row), so windows and sinks need nothing more: they read the copied rows
// as they read computed ones.
//
// Models with Gated DeltaNet layers (config.delta_net) are never served from it: those
// layers keep a state that depends on every earlier token rather than rows per position, and
// blocks of rows cannot restore it, so the cache stays disabled for them (enabled() false).
//
// Eviction is LRU over leaf blocks: a hit or a store touches its chain from the leaf up, so
// a parent is always more recent than its children and the least recent block is a leaf.
// Not thread-safe: one owner (the scheduler thread).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache.h"
#include "model/model_config.h"

namespace moex {

struct PrefixCacheStats {
  int64_t lookups = 0;        // Restore calls.
  int64_t hits = 0;           // Restores that copied at least one block.
  int64_t tokens_reused = 0;  // Tokens whose rows were copied instead of computed.
  int64_t blocks = 0;         // Blocks held now.
  int64_t bytes = 0;          // Their rows' bytes (what the budget bounds).
  int64_t evicted = 0;        // Blocks evicted to keep the budget.
};

class PrefixCache {
 public:
  // budget_bytes 0, or a config with recurrent layers, disables the cache: Restore finds
  // nothing and Store keeps nothing.
  // REQUIRES: budget_bytes >= 0, block_tokens >= 1.
  PrefixCache(const ModelConfig& config, int64_t budget_bytes, int64_t block_tokens = 16);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Copies into `cache` the rows of the longest chain of cached blocks that `tokens` starts
  // with, covering at most `limit` tokens, whose rows were rotated with LongRoPE's long set
  // iff `long_rotation`; advances the cache past them and returns how many tokens that is
  // (a multiple of block_tokens). REQUIRES: cache->length() == 0, cache of this config.
  int64_t Restore(std::span<const int32_t> tokens, int64_t limit, bool long_rotation,
                  KvCache* cache);

  // Keeps the whole blocks of tokens[0, cache.length()) not cached yet. `long_rotation(p)`
  // says whether row p was rotated with LongRoPE's long set (null: never); a block whose
  // rows differ is not kept, nor any after it. REQUIRES: tokens.size() >= cache.length().
  void Store(std::span<const int32_t> tokens, const KvCache& cache,
             const std::function<bool(int64_t)>& long_rotation = nullptr);

  bool enabled() const { return budget_ > 0; }
  int64_t block_tokens() const { return block_tokens_; }
  int64_t budget_bytes() const { return budget_; }
  const PrefixCacheStats& stats() const { return stats_; }

 private:
  struct Block;
  struct Key {
    Block* parent;  // Null for a first block.
    bool long_rotation;
    std::vector<int32_t> tokens;
    bool operator==(const Key& other) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  struct Block {
    const Key* key = nullptr;  // Its entry's key in blocks_ (node keys do not move).
    std::vector<float> rows;   // Per layer: block_tokens K rows, then as many V rows (not MLA).
    int children = 0;
    std::list<Block*>::iterator lru;
  };

  Block* Find(Block* parent, bool long_rotation, std::span<const int32_t> tokens);
  // Most recent first; touched from the leaf up so parents stay ahead of their children.
  void Touch(const std::vector<Block*>& chain);
  void EvictToBudget();

  int64_t budget_;
  int64_t block_tokens_;
  int64_t row_size_;
  bool has_values_;
  int num_layers_;
  int64_t block_bytes_;
  std::unordered_map<Key, std::unique_ptr<Block>, KeyHash> blocks_;
  std::list<Block*> lru_;  // Front: most recently used.
  PrefixCacheStats stats_;
};

}  // namespace moex

// The prefix cache on hand-made KV rows: whole blocks only, the longest chain of exactly
// matching blocks, the limit, LongRoPE's rotation in the key, LRU eviction of leaves under
// the byte budget, a budget of 0, and MLA's single latent row.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "engine/prefix_cache.h"
#include "model/random_model.h"

namespace moex {
namespace {

ModelConfig TinyConfig(Arch arch = Arch::kOlmoe) {
  return RandomModelConfig(arch, ModelSize::kTiny);
}

// Row p of layer l holds the value (p + 1) * 1000 + l (+ 0.5 for values).
void Fill(const std::vector<int32_t>& tokens, KvCache* cache) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int l = 0; l < cache->num_layers(); ++l)
    for (int64_t p = 0; p < n; ++p)
      for (int64_t i = 0; i < cache->row_size(); ++i) {
        cache->keys(l)[p * cache->row_size() + i] = static_cast<float>((p + 1) * 1000 + l);
        if (cache->values(l) != nullptr)
          cache->values(l)[p * cache->row_size() + i] = static_cast<float>((p + 1) * 1000 + l) + 0.5f;
      }
  cache->Advance(n);
}

// True when rows [0, n) of `cache` hold what Fill writes.
bool RowsAreFilled(const KvCache& cache, int64_t n) {
  for (int l = 0; l < cache.num_layers(); ++l)
    for (int64_t p = 0; p < n; ++p)
      for (int64_t i = 0; i < cache.row_size(); ++i) {
        const float k = static_cast<float>((p + 1) * 1000 + l);
        if (cache.keys(l)[p * cache.row_size() + i] != k) return false;
        if (cache.values(l) != nullptr && cache.values(l)[p * cache.row_size() + i] != k + 0.5f)
          return false;
      }
  return true;
}

TEST(PrefixCacheTest, RestoresTheLongestChainOfWholeBlocks) {
  const ModelConfig c = TinyConfig();
  PrefixCache prefix(c, 1 << 30, 4);
  const std::vector<int32_t> first = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  KvCache source(c, 16);
  Fill(first, &source);
  prefix.Store(first, source);
  EXPECT_EQ(prefix.stats().blocks, 2);  // Tokens 1-4 and 5-8; 9-10 is no whole block.

  KvCache same(c, 16);
  EXPECT_EQ(prefix.Restore(first, 9, false, &same), 8);
  EXPECT_EQ(same.length(), 8);
  EXPECT_TRUE(RowsAreFilled(same, 8));

  // The limit: a prompt of 8 tokens reuses at most 7 (its last token's logits start the
  // reply), so only the first block.
  KvCache limited(c, 16);
  EXPECT_EQ(prefix.Restore(first, 7, false, &limited), 4);

  // A different token in the second block: the first block only.
  KvCache diverging(c, 16);
  EXPECT_EQ(prefix.Restore(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 0, 8, 9}, 8, false, &diverging),
            4);
  EXPECT_TRUE(RowsAreFilled(diverging, 4));

  // A different first token: nothing, although the second block's tokens match (a block
  // is keyed by everything before it).
  KvCache other(c, 16);
  EXPECT_EQ(prefix.Restore(std::vector<int32_t>{0, 2, 3, 4, 5, 6, 7, 8, 9}, 8, false, &other), 0);
  EXPECT_EQ(other.length(), 0);

  EXPECT_EQ(prefix.stats().lookups, 4);
  EXPECT_EQ(prefix.stats().hits, 3);
  EXPECT_EQ(prefix.stats().tokens_reused, 8 + 4 + 4);
}

TEST(PrefixCacheTest, StoringAgainKeepsOneCopyAndExtendsTheChain) {
  const ModelConfig c = TinyConfig();
  PrefixCache prefix(c, 1 << 30, 2);
  std::vector<int32_t> tokens = {7, 8, 9, 10};
  KvCache a(c, 8);
  Fill(tokens, &a);
  prefix.Store(tokens, a);
  prefix.Store(tokens, a);
  EXPECT_EQ(prefix.stats().blocks, 2);
  tokens.insert(tokens.end(), {11, 12, 13});
  KvCache b(c, 8);
  Fill(tokens, &b);
  prefix.Store(tokens, b);
  EXPECT_EQ(prefix.stats().blocks, 3);
  EXPECT_EQ(prefix.stats().bytes, 3 * 2 * static_cast<int64_t>(KvCache::BytesPerToken(c)));
  KvCache restored(c, 8);
  EXPECT_EQ(prefix.Restore(tokens, 7, false, &restored), 6);
  EXPECT_TRUE(RowsAreFilled(restored, 6));
}

TEST(PrefixCacheTest, LongRotationIsPartOfTheKey) {
  const ModelConfig c = TinyConfig();
  PrefixCache prefix(c, 1 << 30, 2);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  KvCache source(c, 8);
  Fill(tokens, &source);
  // Rows 0-2 short, 3-5 long: block [2, 4) mixes them and ends the chain.
  prefix.Store(tokens, source, [](int64_t p) { return p >= 3; });
  EXPECT_EQ(prefix.stats().blocks, 1);
  KvCache short_rows(c, 8);
  EXPECT_EQ(prefix.Restore(tokens, 5, false, &short_rows), 2);
  KvCache long_rows(c, 8);
  EXPECT_EQ(prefix.Restore(tokens, 5, true, &long_rows), 0);

  PrefixCache all_long(c, 1 << 30, 2);
  all_long.Store(tokens, source, [](int64_t) { return true; });
  KvCache wants_short(c, 8);
  EXPECT_EQ(all_long.Restore(tokens, 5, false, &wants_short), 0);
  KvCache wants_long(c, 8);
  EXPECT_EQ(all_long.Restore(tokens, 5, true, &wants_long), 4);
}

TEST(PrefixCacheTest, EvictsTheLeastRecentlyUsedLeafToKeepTheBudget) {
  const ModelConfig c = TinyConfig();
  const int64_t block = 2 * static_cast<int64_t>(KvCache::BytesPerToken(c));
  PrefixCache prefix(c, 3 * block, 2);  // Room for three blocks.
  const std::vector<int32_t> a = {1, 2, 3, 4};    // Blocks a1, a2.
  const std::vector<int32_t> b = {1, 2, 9, 9};    // Shares a1; adds b2.
  const std::vector<int32_t> d = {5, 5, 6, 6};    // Two more: d1, d2.
  KvCache ca(c, 4), cb(c, 4), cd(c, 4);
  Fill(a, &ca);
  Fill(b, &cb);
  Fill(d, &cd);
  prefix.Store(a, ca);
  prefix.Store(b, cb);  // a1 (touched), a2, b2: three blocks, a2 least recent.
  EXPECT_EQ(prefix.stats().blocks, 3);
  EXPECT_EQ(prefix.stats().evicted, 0);
  // d needs two blocks: a2 goes (the least recent leaf), then b2 (a1, their parent, was
  // touched after both and is no leaf until they are gone), keeping d1 and d2 and a1.
  prefix.Store(d, cd);
  EXPECT_EQ(prefix.stats().blocks, 3);
  EXPECT_EQ(prefix.stats().evicted, 2);
  EXPECT_LE(prefix.stats().bytes, 3 * block);
  KvCache ra(c, 4), rb(c, 4), rd(c, 4);
  EXPECT_EQ(prefix.Restore(a, 4, false, &ra), 2);  // a1 only.
  EXPECT_EQ(prefix.Restore(b, 4, false, &rb), 2);
  EXPECT_EQ(prefix.Restore(d, 4, false, &rd), 4);
  EXPECT_TRUE(RowsAreFilled(rd, 4));
}

TEST(PrefixCacheTest, ABudgetOfZeroOrBelowOneBlockKeepsNothing) {
  const ModelConfig c = TinyConfig();
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  KvCache source(c, 4);
  Fill(tokens, &source);
  PrefixCache off(c, 0, 2);
  EXPECT_FALSE(off.enabled());
  off.Store(tokens, source);
  KvCache r(c, 4);
  EXPECT_EQ(off.Restore(tokens, 3, false, &r), 0);
  EXPECT_EQ(off.stats().lookups, 0);

  PrefixCache small(c, static_cast<int64_t>(KvCache::BytesPerToken(c)), 2);
  small.Store(tokens, source);
  EXPECT_EQ(small.stats().blocks, 0);
}

TEST(PrefixCacheTest, MlaCachesItsLatentRowOnly) {
  const ModelConfig c = TinyConfig(Arch::kDeepseekV2);
  ASSERT_TRUE(c.mla.has_value());
  PrefixCache prefix(c, 1 << 30, 3);
  const std::vector<int32_t> tokens = {4, 5, 6, 7, 8, 9, 10};
  KvCache source(c, 8);
  ASSERT_EQ(source.values(0), nullptr);
  Fill(tokens, &source);
  prefix.Store(tokens, source);
  EXPECT_EQ(prefix.stats().bytes, 6 * static_cast<int64_t>(KvCache::BytesPerToken(c)));
  KvCache restored(c, 8);
  EXPECT_EQ(prefix.Restore(tokens, 7, false, &restored), 6);
  EXPECT_TRUE(RowsAreFilled(restored, 6));
}

TEST(PrefixCacheTest, RefusesANonEmptyCacheAndBadOptions) {
  const ModelConfig c = TinyConfig();
  EXPECT_THROW(PrefixCache(c, -1, 2), Error);
  EXPECT_THROW(PrefixCache(c, 1 << 20, 0), Error);
  PrefixCache prefix(c, 1 << 20, 2);
  KvCache used(c, 4);
  used.Advance(1);
  EXPECT_THROW(prefix.Restore(std::vector<int32_t>{1, 2, 3}, 2, false, &used), Error);
}

}  // namespace
}  // namespace moex

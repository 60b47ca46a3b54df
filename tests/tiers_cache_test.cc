#include "tiers/expert_cache.h"

#include <gtest/gtest.h>

#include <map>

#include "core/error.h"

namespace moex::tiers {
namespace {

CacheGeometry Geometry(int64_t pages) {
  CacheGeometry g;
  g.num_layers = 2;
  g.num_experts = 4;
  g.neurons = 10;
  g.chunk_neurons = 4;  // Chunks of 4, 4, 2 neurons.
  g.page_bytes = 4096;
  g.capacity_pages = pages;
  return g;
}

int Count(const std::vector<CacheCommand>& cmds, CacheCommand::Kind kind) {
  int n = 0;
  for (const auto& c : cmds) n += c.kind == kind;
  return n;
}

TEST(ExpertCacheTest, InsertFetchesMissingChunksOnce) {
  ExpertCache cache(Geometry(6));
  std::map<std::pair<int, int>, double> score;
  auto scorer = [&](const ExpertKey& k) { return score[{k.layer, k.expert}]; };
  std::vector<CacheCommand> out;
  EXPECT_EQ(cache.geometry().chunks_per_expert(), 3);
  ASSERT_TRUE(cache.Insert({0, 1}, {0, 5}, false, 1.0, scorer, &out));  // Chunks 0 and 1.
  EXPECT_EQ(Count(out, CacheCommand::kFetch), 2);
  EXPECT_EQ(cache.PresentChunks({0, 1}), 2);
  EXPECT_FALSE(cache.Present({0, 1}));
  EXPECT_EQ(cache.PageOf({0, 1}, 2), -1);
  out.clear();
  ASSERT_TRUE(cache.Insert({0, 1}, {}, true, 0, scorer, &out));  // Only chunk 2 is new.
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].chunk, 2);
  EXPECT_TRUE(out[0].demand);
  EXPECT_TRUE(cache.Present({0, 1}));
  EXPECT_EQ(cache.used_pages(), 3);
}

TEST(ExpertCacheTest, EvictsLowestScoreUnpinnedAndNeverExceedsCapacity) {
  ExpertCache cache(Geometry(6));  // Room for two whole experts.
  std::map<std::pair<int, int>, double> score{{{0, 0}, 5}, {{0, 1}, 1}, {{0, 2}, 3}};
  auto scorer = [&](const ExpertKey& k) { return score[{k.layer, k.expert}]; };
  std::vector<CacheCommand> out;
  ASSERT_TRUE(cache.Insert({0, 0}, {}, true, 0, scorer, &out));
  ASSERT_TRUE(cache.Insert({0, 1}, {}, true, 0, scorer, &out));
  out.clear();
  ASSERT_TRUE(cache.Insert({0, 2}, {}, true, 0, scorer, &out));
  EXPECT_FALSE(cache.Present({0, 1}));  // Lowest score went.
  EXPECT_TRUE(cache.Present({0, 0}));
  EXPECT_EQ(Count(out, CacheCommand::kRelease), 3);
  EXPECT_EQ(cache.evictions_per_layer()[0], 1);
  EXPECT_LE(cache.peak_used_pages(), 6);

  // Pinned experts are not candidates; when nothing can go, the insert fails cleanly.
  cache.Pin({0, 0});
  cache.Pin({0, 2});
  out.clear();
  EXPECT_FALSE(cache.Insert({1, 3}, {}, true, 0, scorer, &out));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(cache.PresentChunks({1, 3}), 0);
  cache.Unpin({0, 2});
  EXPECT_TRUE(cache.Insert({1, 3}, {}, true, 0, scorer, &out));
  EXPECT_FALSE(cache.Present({0, 2}));
  EXPECT_THROW(cache.Remove({0, 0}, &out), Error);  // Still pinned.
}

TEST(ExpertCacheTest, AdmissionIsAskedOnlyToEvictAndSeesTheLowestCompetitor) {
  ExpertCache cache(Geometry(6));  // Room for two whole experts.
  std::map<std::pair<int, int>, double> score{{{0, 0}, 5}, {{0, 1}, 1}, {{1, 0}, 4}};
  auto scorer = [&](const ExpertKey& k) { return score[{k.layer, k.expert}]; };
  std::vector<double> asked;
  bool answer = false;
  auto admit = [&](double lowest) {
    asked.push_back(lowest);
    return answer;
  };
  std::vector<CacheCommand> out;
  ASSERT_TRUE(cache.Insert({0, 0}, {}, true, 0, scorer, &out, admit));  // Free pages: not asked.
  ASSERT_TRUE(cache.Insert({0, 1}, {}, true, 0, scorer, &out, admit));
  EXPECT_TRUE(asked.empty());
  out.clear();
  EXPECT_FALSE(cache.Insert({1, 0}, {}, true, 0, scorer, &out, admit));  // Refused: no change.
  EXPECT_EQ(asked, std::vector<double>{1});
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(cache.Present({0, 0}) && cache.Present({0, 1}));
  answer = true;
  EXPECT_TRUE(cache.Insert({1, 0}, {}, true, 0, scorer, &out, admit));
  EXPECT_FALSE(cache.Present({0, 1}));
  // With layer 0 held to one expert, a layer-0 insert competes with layer 0's experts only.
  ASSERT_TRUE(cache.SetLayerBudgets({3, -1}, scorer, &out));
  asked.clear();
  EXPECT_TRUE(cache.Insert({0, 2}, {}, true, 0, scorer, &out, admit));
  EXPECT_EQ(asked, std::vector<double>{5});  // L0e0 (5), not L1e0 (4).
  EXPECT_FALSE(cache.Present({0, 0}));
  EXPECT_TRUE(cache.Present({1, 0}));
}

TEST(ExpertCacheTest, PagesAndGenerationsAreReusedDeterministically) {
  ExpertCache cache(Geometry(3));
  auto scorer = [](const ExpertKey& k) { return static_cast<double>(k.expert); };
  std::vector<CacheCommand> out;
  ASSERT_TRUE(cache.Insert({0, 0}, {}, true, 0, scorer, &out));
  EXPECT_EQ(cache.PageOf({0, 0}, 0), 0);
  EXPECT_EQ(cache.Generation(0), 1u);
  ASSERT_TRUE(cache.Insert({0, 1}, {}, true, 0, scorer, &out));  // Evicts expert 0.
  EXPECT_EQ(cache.PageOf({0, 1}, 0), 0);
  EXPECT_EQ(cache.Generation(0), 2u);  // A stale read into page 0 is recognisable.
}

TEST(ExpertCacheTest, PrefetchBookkeeping) {
  ExpertCache cache(Geometry(3));
  auto scorer = [](const ExpertKey&) { return 0.0; };
  std::vector<CacheCommand> out;
  ASSERT_TRUE(cache.Insert({0, 0}, {}, false, 0, scorer, &out));
  cache.MarkPrefetched({0, 0});
  ASSERT_TRUE(cache.Insert({0, 1}, {}, true, 0, scorer, &out));  // Evicts the unused one.
  EXPECT_EQ(cache.wasted_per_layer()[0], 1);
  cache.MarkPrefetched({0, 1});
  EXPECT_TRUE(cache.TakeUnused({0, 1}));
  EXPECT_FALSE(cache.TakeUnused({0, 1}));
}

}  // namespace
}  // namespace moex::tiers

#include "tiers/fetch_engine.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "support/temp_dir.h"
#include "tiers/storage_link.h"

namespace moex::tiers {
namespace {

// A link that only records submissions; the test completes them by hand.
class ManualLink : public TransferLink {
 public:
  explicit ManualLink(int depth) : depth_(depth) {}
  std::string name() const override { return "manual"; }
  int max_in_flight() const override { return depth_; }
  void SetOnComplete(OnComplete fn) override { done_ = std::move(fn); }
  void Submit(const Transfer& t) override { submitted.push_back(t); }
  void Complete(size_t i, int result = -1) {
    const Transfer t = submitted[i];
    done_(t.tag, result < 0 && result != -5 ? static_cast<int>(t.bytes) : result,
          result == -5 ? "io error" : "");
  }
  std::vector<Transfer> submitted;

 private:
  int depth_;
  OnComplete done_;
};

FetchRequest Req(int expert, int chunk, int32_t page, bool demand, double priority = 0) {
  FetchRequest r;
  r.key = {0, expert};
  r.chunk = chunk;
  r.page = page;
  r.generation = 1;
  r.demand = demand;
  r.priority = priority;
  r.bytes = 4096;
  r.src_offset = static_cast<uint64_t>(expert * 100 + chunk);
  return r;
}

struct Fixture {
  ManualLink* link;
  std::unique_ptr<FetchEngine> engine;
  Fixture(int depth, int max_prefetch) {
    auto l = std::make_unique<ManualLink>(depth);
    link = l.get();
    engine = std::make_unique<FetchEngine>(std::move(l), 16, 1, max_prefetch, nullptr);
  }
  ~Fixture() {
    for (size_t i = done; i < link->submitted.size(); ++i) link->Complete(i);
  }
  void CompleteNext() { link->Complete(done++); }
  size_t done = 0;
};

TEST(FetchEngineTest, DemandBeatsPrefetchAndPriorityOrdersPrefetches) {
  Fixture f(2, 1);
  f.engine->Enqueue(Req(1, 0, 0, false, 1));  // Goes out at once (link idle).
  f.engine->Enqueue(Req(2, 0, 1, false, 1));
  f.engine->Enqueue(Req(3, 0, 2, false, 9));
  f.engine->Enqueue(Req(4, 0, 3, true));
  ASSERT_EQ(f.link->submitted.size(), 2u);  // One prefetch (its cap), then the demand.
  EXPECT_EQ(f.link->submitted[0].src_offset, 100u);
  EXPECT_EQ(f.link->submitted[1].src_offset, 400u);
  f.CompleteNext();
  ASSERT_EQ(f.link->submitted.size(), 3u);
  EXPECT_EQ(f.link->submitted[2].src_offset, 300u);  // Higher priority prefetch first.
}

TEST(FetchEngineTest, PrefetchesLeaveRoomForDemand) {
  Fixture f(4, 3);
  for (int e = 0; e < 6; ++e) f.engine->Enqueue(Req(e, 0, e, false));
  EXPECT_EQ(f.link->submitted.size(), 3u);  // A demand never waits behind a full link.
  f.engine->Enqueue(Req(9, 0, 9, true));
  EXPECT_EQ(f.link->submitted.size(), 4u);
  EXPECT_EQ(f.link->submitted[3].src_offset, 900u);
}

TEST(FetchEngineTest, ChunksOfADemandInterleaveWithQueuedPrefetchChunks) {
  // A demand arriving behind a queued multi-chunk prefetch waits for at most the chunks
  // already in flight, not for the whole prefetched expert.
  Fixture f(1, 0);
  f.engine->Enqueue(Req(5, 0, 0, true));
  for (int c = 0; c < 4; ++c) f.engine->Enqueue(Req(1, c, 1 + c, true, 0));
  f.engine->Enqueue(Req(2, 0, 8, true));
  EXPECT_EQ(f.link->submitted.size(), 1u);
  f.CompleteNext();
  EXPECT_EQ(f.link->submitted.back().src_offset, 100u);
}

TEST(FetchEngineTest, PromoteAndReleaseAndStates) {
  Fixture f(2, 1);
  f.engine->Enqueue(Req(1, 0, 0, false));  // In flight.
  f.engine->Enqueue(Req(2, 0, 1, false));  // Queued (prefetch cap).
  f.engine->Enqueue(Req(2, 1, 2, false));  // Queued.
  f.engine->Enqueue(Req(3, 0, 3, false));  // Queued.
  ASSERT_EQ(f.link->submitted.size(), 1u);
  f.engine->Release(3);  // Expert 3's chunk is dropped before it starts.
  f.engine->Promote({0, 2});
  ASSERT_EQ(f.link->submitted.size(), 2u);
  EXPECT_EQ(f.link->submitted[1].src_offset, 200u);
  EXPECT_EQ(f.engine->State(1, 1, nullptr), ChunkState::kPending);
  f.CompleteNext();
  f.CompleteNext();
  EXPECT_EQ(f.engine->State(1, 1, nullptr), ChunkState::kLanded);
  EXPECT_EQ(f.engine->State(1, 2, nullptr), ChunkState::kPending);  // Newer generation.
  ASSERT_EQ(f.link->submitted.size(), 3u);
  EXPECT_EQ(f.link->submitted[2].src_offset, 201u);
  f.CompleteNext();
  EXPECT_EQ(f.link->submitted.size(), 3u);  // Nothing left: page 3 was released.
  EXPECT_EQ(f.engine->Stats().dropped, 1u);
  EXPECT_EQ(f.engine->completions(), 3u);
}

TEST(FetchEngineTest, NewTransferWaitsForInFlightOneOnTheSamePage) {
  Fixture f(4, 3);
  f.engine->Enqueue(Req(1, 0, 0, false));
  f.engine->Release(0);  // Evicted while in flight.
  FetchRequest again = Req(2, 0, 0, true);
  again.generation = 2;
  f.engine->Enqueue(again);  // Page 0 is busy: must wait.
  EXPECT_EQ(f.link->submitted.size(), 1u);
  f.CompleteNext();
  EXPECT_EQ(f.link->submitted.size(), 2u);
  EXPECT_EQ(f.engine->State(0, 2, nullptr), ChunkState::kPending);
  f.CompleteNext();
  EXPECT_EQ(f.engine->State(0, 2, nullptr), ChunkState::kLanded);
}

TEST(FetchEngineTest, FailuresAreReportedPerGeneration) {
  Fixture f(2, 1);
  f.engine->Enqueue(Req(1, 0, 0, true));
  f.link->Complete(0, -5);
  f.done = 1;
  std::string error;
  EXPECT_EQ(f.engine->State(0, 1, &error), ChunkState::kFailed);
  EXPECT_NE(error.find("expert 1"), std::string::npos) << error;
}

// The storage link's reaper thread starts with the completion callback, so everything set up
// before it happens-before every completion (the ring goes through the kernel, which
// ThreadSanitizer cannot see: `make test-tsan` reported the callback and the fetch engine's
// mutex as raced when the thread started in the constructor). A read lands with its bytes; a
// second callback is refused; a link that never got one closes without a thread to stop.
TEST(StorageLinkTest, ReaperStartsWithTheCallback) {
  testing::TempDir dir;
  const std::string path = dir / "data.bin";
  std::ofstream(path, std::ios::binary) << "0123456789abcdef";
  { StorageLink unused(path, 4, false); }

  StorageLink link(path, 4, false);
  std::mutex m;
  std::condition_variable cv;
  int result = -1;
  link.SetOnComplete([&](uint64_t tag, int r, const std::string&) {
    std::lock_guard<std::mutex> lock(m);
    EXPECT_EQ(tag, 7u);
    result = r;
    cv.notify_all();
  });
  EXPECT_THROW(link.SetOnComplete([](uint64_t, int, const std::string&) {}), Error);
  std::vector<std::byte> buf(6);
  link.Submit({7, 10, buf.data(), 6});
  std::unique_lock<std::mutex> lock(m);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return result >= 0; }));
  EXPECT_EQ(result, 6);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), 6), "abcdef");
}

}  // namespace
}  // namespace moex::tiers

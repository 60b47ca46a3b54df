// The stores of a directory (io/store_catalog.h): listed with what they hold and where they
// came from; removed only when they are stores, with the flag and temporaries packing left,
// and never while a live process packs them. Also the size a store will take, known before
// packing (ExpertStoreBytes), and the free-space refusal.
#include "io/store_catalog.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/expert_store.h"
#include "io/store_output.h"
#include "model/expert_store_packer.h"
#include "support/error_of.h"
#include "support/random_weight_source.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using testing::ErrorOf;

ModelConfig TinyConfig() {
  ModelConfig c;
  c.arch = Arch::kOlmoe;
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 40;
  return c;
}

void Pack(const std::string& path, const std::string& source_path) {
  const ModelConfig c = TinyConfig();
  RandomWeightSource src(c, DType::kBF16, 1);
  PackOptions o;
  o.out_path = path;
  o.source_id = "content-0000000000000001";
  o.source_path = source_path;
  o.progress = false;
  PackExpertStore(src, c, o);
}

// A PID that ran and has exited (reaped), so no process has it for now.
long DeadPid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

TEST(StoreSize, KnownBeforePackingEqualsThePackedFile) {
  testing::TempDir dir;
  const ModelConfig c = TinyConfig();
  RandomWeightSource src(c, DType::kBF16, 1);
  const uint64_t planned = ExpertStoreBytes(src, c);
  // By hand: a bf16 record is gate row + up row + down column = 3 * 64 * 2 = 384 bytes; 40
  // neurons make 15360 bytes, padded to 16384 (4 KiB); 2 layers x 4 experts = 131072 bytes of
  // data after the 4 KiB header and the table, itself padded to 4 KiB.
  EXPECT_EQ(planned % 4096, 0u);
  EXPECT_EQ(planned, 4096u + 4096u + 8u * 16384u);
  Pack(dir / "s.experts.moex", "/models/tiny");
  EXPECT_EQ(fs::file_size(dir / "s.experts.moex"), planned);
}

TEST(StoreSize, RefusedBeforeWritingWhenTheDiskIsTooSmall) {
  testing::TempDir dir;
  EXPECT_GT(CheckRoomFor(dir.path().string(), 4096, "a store", "--store"), 4096);
  const std::string why = ErrorOf(
      [&] { CheckRoomFor(dir.path().string(), uint64_t{1} << 62, "the store of m", "--store"); });
  EXPECT_NE(why.find("the store of m needs"), std::string::npos) << why;
  EXPECT_NE(why.find("GB free"), std::string::npos) << why;
  EXPECT_NE(why.find("--store FILE"), std::string::npos) << why;
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(StoreCatalog, ListsStoresWithTheirModelAndFlagsTheUnusable) {
  testing::TempDir dir;
  EXPECT_TRUE(ListExpertStores(dir / "nothing-here").empty());
  fs::create_directory(dir.path() / "model");
  Pack(dir / "b.experts.moex", dir / "model");
  Pack(dir / "a.experts.moex", dir / "gone");
  std::ofstream(dir / "c.experts.moex") << std::string(5000, 'x');  // No store magic.
  std::ofstream(dir / "notes.txt") << "not listed";
  const std::vector<StoreEntry> stores = ListExpertStores(dir.path().string());
  ASSERT_EQ(stores.size(), 3u);
  EXPECT_EQ(fs::path(stores[0].path).filename(), "a.experts.moex");
  EXPECT_EQ(stores[0].source_path, dir / "gone");
  EXPECT_FALSE(stores[0].source_exists);
  EXPECT_EQ(stores[1].source_path, dir / "model");
  EXPECT_TRUE(stores[1].source_exists);
  EXPECT_EQ(stores[1].arch, "olmoe");
  EXPECT_EQ(stores[1].bytes, fs::file_size(dir / "b.experts.moex"));
  EXPECT_GT(stores[1].created_unix, 0u);
  EXPECT_EQ(stores[1].problem, "");
  EXPECT_NE(stores[2].problem.find("not a moex expert store"), std::string::npos)
      << stores[2].problem;
}

TEST(StoreCatalog, RemoveTakesTheStoreItsFlagAndDeadPackersTemporaries) {
  testing::TempDir dir;
  const std::string store = dir / "m.experts.moex";
  Pack(store, "/models/m");
  std::ofstream(store + ".corrupt") << "block 3";
  const std::string stale = store + ".partial." + std::to_string(DeadPid()) + ".1";
  std::ofstream(stale) << "half a store";
  std::ofstream(dir / "other.experts.moex.partial.1.1") << "another store's";
  const uint64_t bytes = fs::file_size(store);
  EXPECT_EQ(RemoveExpertStore(store), bytes);
  EXPECT_FALSE(fs::exists(store));
  EXPECT_FALSE(fs::exists(store + ".corrupt"));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(dir / "other.experts.moex.partial.1.1"));
  EXPECT_NE(ErrorOf([&] { RemoveExpertStore(store); }).find("no expert store"), std::string::npos);
}

TEST(StoreCatalog, RemoveRefusesWhatIsNotAStoreOrIsBeingPacked) {
  testing::TempDir dir;
  std::ofstream(dir / "x.experts.moex") << "precious";
  EXPECT_NE(
      ErrorOf([&] { RemoveExpertStore(dir / "x.experts.moex"); }).find("not a moex expert store"),
      std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "x.experts.moex"));
  const std::string store = dir / "m.experts.moex";
  Pack(store, "/models/m");
  // This process "is packing" it: its temporary names a live PID.
  const std::string live = store + ".partial." + std::to_string(getpid()) + ".9";
  std::ofstream(live) << "in progress";
  const std::string why = ErrorOf([&] { RemoveExpertStore(store); });
  EXPECT_NE(why.find("is packing"), std::string::npos) << why;
  EXPECT_TRUE(fs::exists(store));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_EQ(RemoveStalePartials(store), 0);  // Live packers' files stay.
}

}  // namespace
}  // namespace moex

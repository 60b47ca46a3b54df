#include "io/expert_store.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "core/error.h"
#include "io/expert_store_format.h"
#include "model/expert_store_packer.h"
#include "support/random_weight_source.h"

namespace moex {
namespace {

ModelConfig TinyConfig() {
  ModelConfig c;
  c.arch = Arch::kOlmoe;
  c.hidden_size = 64;
  c.num_layers = 3;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 40;
  c.first_k_dense_replace = 1;  // Layer 0 dense: the store lists layers 1 and 2 only.
  return c;
}

class ExpertStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("moex_store_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    opts_.out_path = (dir_ / "experts.moex").string();
    opts_.source_id = "ckpt-test";
    opts_.progress = false;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  PackOptions opts_;
};

TEST(ExpertStoreFormatTest, ChecksumSeesEveryByteAndLength) {
  std::vector<std::byte> a(100, std::byte{7});
  const uint64_t h = StoreChecksum(a);
  for (size_t i = 0; i < a.size(); ++i) {
    auto b = a;
    b[i] ^= std::byte{1};
    EXPECT_NE(StoreChecksum(b), h) << i;
  }
  EXPECT_NE(StoreChecksum(std::span(a.data(), 99)), h);
  std::vector<std::byte> zeros(64);
  EXPECT_NE(StoreChecksum(std::span(zeros.data(), 32)), StoreChecksum(zeros));
}

TEST(ExpertStoreFormatTest, BlocksAreAligned) {
  EXPECT_EQ(StoreBlockNeurons(12288, 1024), 1u);  // OLMoE bf16: one record = 3 pages.
  EXPECT_EQ(StoreBlockNeurons(768, 1024), 16u);
  EXPECT_EQ(StoreBlockNeurons(768, 10), 10u);  // Capped at F: the block is the expert.
  for (uint64_t r : {6u, 384u, 6528u, 12000u}) {
    EXPECT_EQ(StoreBlockNeurons(r, 1u << 20) * r % kStoreAlignment, 0u) << r;
  }
}

TEST_F(ExpertStoreTest, PackedRecordsAreNeuronMajorCopies) {
  const ModelConfig c = TinyConfig();
  RandomWeightSource src(c, DType::kBF16, 1);
  PackExpertStore(src, c, opts_);
  ExpertStore store = ExpertStore::Open(opts_.out_path);
  EXPECT_EQ(store.moe_layers(), (std::vector<int>{1, 2}));
  EXPECT_EQ(store.MoeIndex(0), -1);
  EXPECT_EQ(store.record_bytes(), 3u * 64 * 2);
  EXPECT_EQ(StoreMismatch(store, c, DType::kBF16, "ckpt-test"), "");
  EXPECT_NE(StoreMismatch(store, c, DType::kBF16, "ckpt-other"), "");
  EXPECT_NE(StoreMismatch(store, c, DType::kF32, "ckpt-test"), "");
  store.VerifyData();

  std::ifstream in(opts_.out_path, std::ios::binary);
  std::vector<char> file((std::istreambuf_iterator<char>(in)), {});
  const int layer = 2, expert = 3;
  const auto* g = src.Find(RoutedExpertTensorName(c.arch, layer, expert, 0));
  const auto* u = src.Find(RoutedExpertTensorName(c.arch, layer, expert, 1));
  const auto* d = src.Find(RoutedExpertTensorName(c.arch, layer, expert, 2));
  EXPECT_EQ(store.ExpertOffset(layer, expert) % kStoreAlignment, 0u);
  const char* rec0 = file.data() + store.ExpertOffset(layer, expert);
  for (int i : {0, 17, 39}) {
    const char* rec = rec0 + i * store.record_bytes();
    EXPECT_EQ(std::memcmp(rec, g->data + i * 128, 128), 0);
    EXPECT_EQ(std::memcmp(rec + 128, u->data + i * 128, 128), 0);
    for (int o = 0; o < 64; ++o)
      EXPECT_EQ(std::memcmp(rec + 256 + 2 * o, d->data + (o * 40 + i) * 2, 2), 0);
  }
}

TEST_F(ExpertStoreTest, MixtralNamesArePacked) {
  ModelConfig c = TinyConfig();
  c.arch = Arch::kMixtral;
  c.first_k_dense_replace = 0;
  RandomWeightSource src(c, DType::kF32, 2);
  PackExpertStore(src, c, opts_);
  EXPECT_EQ(ExpertStore::Open(opts_.out_path).moe_layers().size(), 3u);
}

TEST_F(ExpertStoreTest, TruncatedStoreIsRejectedAndRebuilt) {
  const ModelConfig c = TinyConfig();
  RandomWeightSource src(c, DType::kBF16, 1);
  PackExpertStore(src, c, opts_);
  const auto size = std::filesystem::file_size(opts_.out_path);
  std::filesystem::resize_file(opts_.out_path, size - 4096);
  EXPECT_THROW(
      {
        try {
          ExpertStore::Open(opts_.out_path);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  ExpertStore again = OpenOrPackExpertStore(src, c, opts_);
  EXPECT_EQ(std::filesystem::file_size(opts_.out_path), size);
  again.VerifyData();
}

TEST_F(ExpertStoreTest, CorruptDataFailsVerificationAndFlaggedStoreIsRebuilt) {
  const ModelConfig c = TinyConfig();
  RandomWeightSource src(c, DType::kBF16, 1);
  PackExpertStore(src, c, opts_);
  const uint64_t at = ExpertStore::Open(opts_.out_path).ExpertOffset(1, 2) + 1000;
  {
    std::fstream f(opts_.out_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put('\x5a');
  }
  ExpertStore bad = ExpertStore::Open(opts_.out_path);  // Header and table are fine.
  EXPECT_THROW(bad.VerifyData(), Error);
  MarkExpertStoreCorrupt(opts_.out_path, "test");
  OpenOrPackExpertStore(src, c, opts_).VerifyData();
  EXPECT_FALSE(std::filesystem::exists(opts_.out_path + ".corrupt"));
}

TEST_F(ExpertStoreTest, CorruptHeaderIsRebuilt) {
  const ModelConfig c = TinyConfig();
  RandomWeightSource src(c, DType::kBF16, 1);
  PackExpertStore(src, c, opts_);
  {
    std::fstream f(opts_.out_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 3);  // Inside the table.
    f.put('\x01');
  }
  EXPECT_THROW(ExpertStore::Open(opts_.out_path), Error);
  OpenOrPackExpertStore(src, c, opts_).VerifyData();
}

// Found by expert_store_fuzzer: header fields with valid checksums but impossible values.
// A layer count of 4 billion allocated 16 GB; a repeated MoE layer id left an index stale;
// an expert stride whose product with the expert count wraps around aliased the file size;
// a record size that is not three rows reached the kernels. Each is now a clear error.
TEST_F(ExpertStoreTest, ImpossibleHeaderValuesAreRefused) {
  const ModelConfig c = TinyConfig();
  RandomWeightSource src(c, DType::kBF16, 1);
  PackExpertStore(src, c, opts_);
  std::vector<char> good;
  {
    std::ifstream in(opts_.out_path, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Rewrites the store with `edit` applied to its header and table, checksums recomputed.
  StoreHeader original;
  std::memcpy(&original, good.data(), sizeof original);
  auto open_edited = [&](const std::function<void(StoreHeader&, std::vector<char>&)>& edit) {
    std::vector<char> bytes = good;
    StoreHeader h = original;
    edit(h, bytes);
    h.table_checksum = StoreChecksum(std::as_bytes(std::span(
        bytes.data() + original.table_offset, static_cast<size_t>(original.table_bytes))));
    h.header_checksum = 0;
    h.header_checksum = StoreChecksum(std::as_bytes(std::span(&h, 1)));
    std::memcpy(bytes.data(), &h, sizeof h);
    std::ofstream(opts_.out_path, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    try {
      ExpertStore::Open(opts_.out_path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(open_edited([](StoreHeader&, std::vector<char>&) {}), "");  // The baseline opens.
  EXPECT_NE(open_edited([](StoreHeader& h, std::vector<char>&) {
              h.num_layers = 0xff000002u;
            }).find("invalid header"),
            std::string::npos);
  EXPECT_NE(open_edited([](StoreHeader&, std::vector<char>& b) {
              std::memcpy(b.data() + 4096 + 4, b.data() + 4096, 4);  // Layers [1, 1].
            }).find("out of order"),
            std::string::npos);
  EXPECT_NE(open_edited([](StoreHeader& h, std::vector<char>&) {
              h.expert_stride += uint64_t{1} << 63;  // x 8 experts wraps to the true size.
            }).find("inconsistent layout"),
            std::string::npos);
  EXPECT_NE(open_edited([](StoreHeader& h, std::vector<char>&) {
              h.record_bytes += 2;
            }).find("widest layer's take"),
            std::string::npos);
  // Per-layer dtypes (version 4): an unknown one, and a block format the bf16 store's
  // one-neuron groups cannot hold.
  EXPECT_NE(open_edited([](StoreHeader& h, std::vector<char>&) { h.layer_dtypes[1] = 200; })
                .find("invalid dtype for MoE layer #0"),
            std::string::npos);
  EXPECT_NE(open_edited([](StoreHeader& h, std::vector<char>&) {
              h.layer_dtypes[2] = static_cast<uint8_t>(DType::kQ4_K);
              h.layer_dtypes[3] = static_cast<uint8_t>(DType::kQ4_K);
            }).find("has MoE layer #1 in q4_K/q4_K"),
            std::string::npos);
}

TEST_F(ExpertStoreTest, StaleSourceIsRebuilt) {
  const ModelConfig c = TinyConfig();
  RandomWeightSource a(c, DType::kBF16, 1);
  PackExpertStore(a, c, opts_);
  RandomWeightSource b(c, DType::kBF16, 9);
  opts_.source_id = "ckpt-new";
  ExpertStore s = OpenOrPackExpertStore(b, c, opts_);
  EXPECT_EQ(StoreMismatch(s, c, DType::kBF16, "ckpt-new"), "");
}

TEST_F(ExpertStoreTest, DiskFullLeavesNoStoreBehind) {
  const ModelConfig c = TinyConfig();
  RandomWeightSource src(c, DType::kF32, 1);
  // A file-size limit makes writes fail with EFBIG, as a full disk fails with ENOSPC.
  struct rlimit old;
  getrlimit(RLIMIT_FSIZE, &old);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 64 * 1024;
  setrlimit(RLIMIT_FSIZE, &small);
  std::string message;
  try {
    PackExpertStore(src, c, opts_);
  } catch (const Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("disk full"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(opts_.out_path));
  EXPECT_FALSE(std::filesystem::exists(opts_.out_path + ".partial"));
  // The next use packs from scratch and succeeds.
  OpenOrPackExpertStore(src, c, opts_).VerifyData();
}

}  // namespace
}  // namespace moex

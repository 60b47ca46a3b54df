// A model's identity on disk (model/model_identity.h) and where its store goes by default
// (model/store_location.h): the content hash follows bytes, not paths or times, covers
// every part of a split GGUF, and names the store in the user's cache directory.
#include "model/model_identity.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/checksum.h"
#include "core/error.h"
#include "io/gguf_split_name.h"
#include "model/store_location.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Sets an environment variable for one scope (nullptr: unset), restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    had_ = std::getenv(name) != nullptr;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(GgufSplitName, ParsesLlamaCppNamingOnly) {
  const auto split = ParseGgufSplitName("/m/Qwen3-235B-A22B-Q4_K_M-00002-of-00003.gguf");
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->prefix, "/m/Qwen3-235B-A22B-Q4_K_M");
  EXPECT_EQ(split->no, 2);
  EXPECT_EQ(split->count, 3);
  EXPECT_EQ(GgufSplitPartPath("/m/x", 1, 3), "/m/x-00001-of-00003.gguf");
  for (const char* not_split : {"/m/model.gguf", "-00001-of-00003.gguf", "/m/x-00004-of-00003.gguf",
                                "/m/x-00000-of-00003.gguf", "/m/x-0001a-of-00003.gguf",
                                "/m/x-00001_of-00003.gguf", "/m/x-00001-of-00003.bin"})
    EXPECT_FALSE(ParseGgufSplitName(not_split).has_value()) << not_split;
  EXPECT_EQ(GgufPartPaths("/m/x-00001-of-00002.gguf"),
            (std::vector<std::string>{"/m/x-00001-of-00002.gguf", "/m/x-00002-of-00002.gguf"}));
  // A later part names only itself: the reader refuses it with a hint to pass the first.
  EXPECT_EQ(GgufPartPaths("/m/x-00002-of-00002.gguf"),
            std::vector<std::string>{"/m/x-00002-of-00002.gguf"});
}

// By hand: a file's digest hashes its size (8 bytes, little-endian) and then its bytes (all
// of them, under 1 MiB); a single-file model's id hashes that one 8-byte digest.
TEST(ModelContentId, SmallFileIsHashedAsDocumented) {
  testing::TempDir dir;
  Write(dir / "m.gguf", "GGUFabc");
  std::string digest_input(8, '\0');
  digest_input[0] = 7;
  digest_input += "GGUFabc";
  const uint64_t digest = Checksum64(std::as_bytes(std::span(digest_input)));
  char want[32];
  std::snprintf(want, sizeof want, "content-%016llx",
                static_cast<unsigned long long>(Checksum64(std::as_bytes(std::span(&digest, 1)))));
  EXPECT_EQ(ModelContentId(dir / "m.gguf"), want);
}

TEST(ModelContentId, FollowsContentNotPathOrTime) {
  testing::TempDir dir;
  fs::create_directory(dir.path() / "a");
  Write(dir / "a/config.json", R"({"model_type": "olmoe"})");
  Write(dir / "a/model.safetensors", std::string(3 << 20, 'w'));  // Beyond the first MiB.
  Write(dir / "a/README.md", "not part of the checkpoint");
  const std::string id = ModelContentId(dir / "a");
  EXPECT_EQ(id.size(), 8u + 16u);
  EXPECT_EQ(id.rfind("content-", 0), 0u);
  // A copy elsewhere, written later, is the same model.
  fs::copy(dir.path() / "a", dir.path() / "b", fs::copy_options::recursive);
  fs::last_write_time(
      dir.path() / "b/model.safetensors",
      fs::last_write_time(dir.path() / "b/model.safetensors") + std::chrono::hours(1));
  Write(dir / "b/README.md", "edited");
  EXPECT_EQ(ModelContentId(dir / "b"), id);
  // Content changes it: the config, a byte in the head, a byte at a sampled place far in, the size.
  Write(dir / "b/config.json", R"({"model_type": "olmoe", "x": 1})");
  EXPECT_NE(ModelContentId(dir / "b"), id);
  Write(dir / "b/config.json", R"({"model_type": "olmoe"})");
  EXPECT_EQ(ModelContentId(dir / "b"), id);
  auto poke = [&](uint64_t offset) {
    std::fstream f(dir / "b/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put('x');
  };
  poke(100);
  EXPECT_NE(ModelContentId(dir / "b"), id);
  {
    std::fstream f(dir / "b/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('w');
  }
  EXPECT_EQ(ModelContentId(dir / "b"), id);
  poke((3 << 20) - 1);  // The last byte: inside the last sample.
  EXPECT_NE(ModelContentId(dir / "b"), id);
  Write(dir / "b/model.safetensors", std::string((3 << 20) + 1, 'w'));
  EXPECT_NE(ModelContentId(dir / "b"), id);
  // A renamed weight file is another checkpoint layout.
  fs::rename(dir.path() / "a/model.safetensors", dir.path() / "a/model-00001.safetensors");
  EXPECT_NE(ModelContentId(dir / "a"), id);
}

TEST(ModelContentId, CoversEverySplitPartAndNamesTheMissingOne) {
  testing::TempDir dir;
  const std::string first = dir / "big-00001-of-00002.gguf";
  Write(first, "GGUF part one");
  Write(dir / "big-00002-of-00002.gguf", "GGUF part two");
  EXPECT_EQ(ModelFiles(first).size(), 2u);
  const std::string id = ModelContentId(first);
  Write(dir / "big-00002-of-00002.gguf", "GGUF part 2!!");
  EXPECT_NE(ModelContentId(first), id);
  fs::remove(dir.path() / "big-00002-of-00002.gguf");
  try {
    ModelContentId(first);
    FAIL() << "a missing part must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("big-00002-of-00002.gguf"), std::string::npos) << e.what();
  }
}

TEST(ModelShortName, ReadableNamesForPublishedLayouts) {
  testing::TempDir dir;
  Write(dir / "Qwen3-30B-A3B-Q4_K_M.gguf", "GGUF");
  EXPECT_EQ(ModelShortName(dir / "Qwen3-30B-A3B-Q4_K_M.gguf"), "Qwen3-30B-A3B-Q4_K_M");
  Write(dir / "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf", "GGUF");
  EXPECT_EQ(ModelShortName(dir / "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"),
            "Qwen3-235B-A22B-Q4_K_M");
  // A Hugging Face cache snapshot is named after its repository, not its revision.
  const fs::path snapshot = dir.path() / "models--Qwen--Qwen3-30B-A3B/snapshots/ae659febe8";
  fs::create_directories(snapshot);
  EXPECT_EQ(ModelShortName(snapshot.string()), "Qwen3-30B-A3B");
  fs::create_directories(dir.path() / "my model (v2)");
  EXPECT_EQ(ModelShortName(dir / "my model (v2)"), "my_model__v2_");
  fs::create_directories(dir.path() / ".hidden");
  EXPECT_EQ(ModelShortName(dir / ".hidden"), "hidden");
}

TEST(StoreLocation, CacheDirectoryFollowsXdgThenHome) {
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/somewhere/cache");
    EXPECT_EQ(ExpertStoreCacheDir(), "/somewhere/cache/moex");
  }
  {
    // The XDG spec ignores a relative XDG_CACHE_HOME.
    ScopedEnv xdg("XDG_CACHE_HOME", "relative");
    ScopedEnv home("HOME", "/home/u");
    EXPECT_EQ(ExpertStoreCacheDir(), "/home/u/.cache/moex");
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", nullptr);
    EXPECT_NE(testing::ErrorOf([] { ExpertStoreCacheDir(); }).find("--store"), std::string::npos);
  }
}

TEST(StoreLocation, DefaultStoreIsNamedAfterTheModelInTheCache) {
  testing::TempDir dir;
  Write(dir / "Mixtral-8x7B.gguf", "GGUF");
  ScopedEnv xdg("XDG_CACHE_HOME", (dir / "cache").c_str());
  const std::string id = "content-0123456789abcdef";
  EXPECT_EQ(CachedStoreName(dir / "Mixtral-8x7B.gguf", id),
            "Mixtral-8x7B-0123456789abcdef.experts.moex");
  EXPECT_EQ(DefaultExpertStorePath(dir / "Mixtral-8x7B.gguf", id),
            dir / "cache/moex/Mixtral-8x7B-0123456789abcdef.experts.moex");
  EXPECT_TRUE(fs::is_directory(dir.path() / "cache/moex"));
  // A store of the same content under another model name is found by its hash.
  Write(dir / "cache/moex/renamed-0123456789abcdef.experts.moex", "store");
  EXPECT_EQ(DefaultExpertStorePath(dir / "Mixtral-8x7B.gguf", id),
            dir / "cache/moex/renamed-0123456789abcdef.experts.moex");
  // A cache directory that cannot be made: a clear error with the way out.
  Write(dir / "file", "x");
  ScopedEnv blocked("XDG_CACHE_HOME", (dir / "file").c_str());
  EXPECT_NE(testing::ErrorOf([&] {
              DefaultExpertStorePath(dir / "Mixtral-8x7B.gguf", id);
            }).find("--store"),
            std::string::npos);
}

}  // namespace
}  // namespace moex

// The shared "{arch}.*" key helpers the per-architecture GGUF readers use.
#include "model/gguf_arch_keys.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"

#include "support/temp_dir.h"

namespace moex {
namespace {

// The message of the Error `f` throws; empty when it throws none.
template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GgufArchKeysTest, ReadsAndWritesTheArchitecturesKeys) {
  moex::testing::TempDir dir;
  const std::string path = (dir.path() / "keys.gguf").string();
  constexpr gguf_keys::ArchKeys keys{"glm4moe"};
  EXPECT_EQ(keys.Key("expert_count"), "glm4moe.expert_count");
  EXPECT_EQ(gguf_keys::Key("gpt-oss", "swiglu_limit"), "gpt-oss.swiglu_limit");
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("glm4moe"));
  keys.SetU32(w, "block_count", 46);
  keys.SetU32(w, "zero", 0);
  keys.SetF32(w, "expert_weights_scale", 2.5f);
  w.Set("glm4moe.negative", GgufValue::I32(-3));
  w.Set("glm4moe.huge", GgufValue::U64(1ull << 31));
  w.Write(path);
  const GgufFile f(path);

  EXPECT_TRUE(keys.Has(f, "block_count"));
  EXPECT_FALSE(keys.Has(f, "block_count_"));
  EXPECT_EQ(keys.Int(f, "block_count", 7), 46);
  EXPECT_EQ(keys.Int(f, "absent", 7), 7);
  EXPECT_EQ(keys.RequiredInt(f, "zero"), 0);
  EXPECT_EQ(keys.PositiveInt(f, "block_count"), 46);
  EXPECT_EQ(f.GetFloat("glm4moe.expert_weights_scale"), 2.5);

  const std::string p = f.path();
  EXPECT_EQ(ErrorOf([&] { keys.Int(f, "negative", 0); }),
            p + ": GGUF key 'glm4moe.negative' out of range: -3");
  EXPECT_EQ(ErrorOf([&] { keys.Int(f, "huge", 0); }),
            p + ": GGUF key 'glm4moe.huge' out of range: 2147483648");
  EXPECT_EQ(ErrorOf([&] { keys.Int(f, "absent", -1); }),
            p + ": GGUF key 'glm4moe.absent' out of range: -1");
  EXPECT_EQ(ErrorOf([&] { keys.RequiredInt(f, "absent"); }),
            p + ": glm4moe GGUF without 'glm4moe.absent'");
  EXPECT_EQ(ErrorOf([&] { keys.PositiveInt(f, "absent"); }),
            p + ": glm4moe GGUF without 'glm4moe.absent'");
  EXPECT_EQ(ErrorOf([&] { keys.PositiveInt(f, "zero"); }),
            p + ": glm4moe.zero = 0 is out of range");
}

}  // namespace
}  // namespace moex

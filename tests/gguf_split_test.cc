// Split GGUFs (llama.cpp's gguf-split: NAME-00001-of-0000N.gguf, the metadata in the first
// part, tensors spread over all): the first part loads the whole model, bit for bit as the
// single file; a missing, mismatched or misnamed part is a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "support/error_of.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using testing::Moex;
using testing::RunCommand;

// Writes `source` as `parts` files PREFIX-0000k-of-0000N.gguf, as gguf-split does: every
// metadata key in the first, split.no / split.count / split.tensors.count in each, the
// tensors in order, about evenly.
void SplitGguf(const std::string& source, const std::string& prefix, int parts) {
  const GgufFile in(source);
  const auto& infos = in.tensor_infos();
  const size_t per_part = (infos.size() + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
  for (int k = 0; k < parts; ++k) {
    GgufWriter w;
    if (k == 0)
      for (const auto& [key, value] : in.metadata())
        if (key != "general.alignment") w.Set(key, value);
    w.Set("split.no", GgufValue::U16(static_cast<uint16_t>(k)));
    w.Set("split.count", GgufValue::U16(static_cast<uint16_t>(parts)));
    w.Set("split.tensors.count", GgufValue::I32(static_cast<int32_t>(infos.size())));
    for (size_t i = static_cast<size_t>(k) * per_part;
         i < std::min(infos.size(), static_cast<size_t>(k + 1) * per_part); ++i) {
      const TensorView* t = in.FindTensor(infos[i].name);
      w.AddTensor(t->name, t->dtype, t->shape, t->data);
    }
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", k + 1, parts);
    w.Write(prefix + suffix);
  }
}

std::string Logits(const std::string& model, const std::string& out) {
  const auto r = RunCommand(Moex("logits --model " + model + " --prompt-ids 1,2,3 --out " + out));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(GgufSplit, TheFirstPartLoadsTheWholeModelBitForBit) {
  testing::TempDir dir;
  const std::string whole = dir / "m.gguf";
  const auto made = RunCommand(
      Moex("random-model --arch olmoe --size tiny --format gguf --no-tokenizer --out " + whole));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  SplitGguf(whole, dir / "m", 3);
  const std::string first = dir / "m-00001-of-00003.gguf";
  const GgufFile split(first);
  EXPECT_EQ(split.parts(), 3u);
  EXPECT_EQ(split.tensor_infos().size(), GgufFile(whole).tensor_infos().size());
  const std::string expected = Logits(whole, dir / "whole.f32");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(Logits(first, dir / "split.f32"), expected);
  // Offloaded from the split file: the same logits.
  const auto r = RunCommand(Moex("logits --model " + first + " --prompt-ids 1,2,3 --out " +
                                 (dir / "off.f32") + " --host-budget 25% --store " +
                                 (dir / "store")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream off(dir / "off.f32", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(off), {}), expected);
}

TEST(GgufSplit, AMissingMismatchedOrMisnamedPartIsAClearError) {
  testing::TempDir dir;
  const std::string whole = dir / "m.gguf";
  ASSERT_EQ(RunCommand(Moex("random-model --arch olmoe --size tiny --format gguf "
                            "--no-tokenizer --out " + whole))
                .exit_code,
            0);
  SplitGguf(whole, dir / "m", 2);
  const std::string first = dir / "m-00001-of-00002.gguf";
  const std::string second = dir / "m-00002-of-00002.gguf";
  // The second part given: name the first.
  EXPECT_NE(testing::ErrorOf([&] { GgufFile f(second); }).find("pass the first part"),
            std::string::npos);
  // Renamed: the other parts cannot be found.
  fs::copy_file(first, dir / "renamed.gguf");
  EXPECT_NE(testing::ErrorOf([&] { GgufFile f(dir / "renamed.gguf"); })
                .find("must be named NAME-00001-of-00002.gguf"),
            std::string::npos);
  // Part 2 missing, through the command line too.
  fs::rename(second, dir / "aside.gguf");
  EXPECT_NE(testing::ErrorOf([&] { GgufFile f(first); }).find("part 2 of 2 of this split GGUF is missing"),
            std::string::npos);
  const auto r = RunCommand(Moex("generate --model " + first + " --prompt-ids 1 -n 1"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is missing"), std::string::npos) << r.err;
  // A part from another split (its split.no is not 1).
  fs::copy_file(first, second);
  EXPECT_NE(testing::ErrorOf([&] { GgufFile f(first); }).find("is not part 2 of 2"),
            std::string::npos);
}

}  // namespace
}  // namespace moex

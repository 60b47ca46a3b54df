// A routed expert's block scales are checked when its bytes are packed (the resident copy,
// the expert store), not when the model is opened: opening a GGUF bigger than memory reads
// none of its experts, and an offloaded model with a store never reads them from the file
// again. A non-finite scale is still refused, by expert tensor and block, before it runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "engine/moe_executor.h"
#include "io/gguf_file.h"
#include "model/model.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

constexpr const char* kWant =
    "q4_K expert tensor 'model.layers.1.mlp.experts.3.up_proj.weight' block 5 has a non-finite "
    "scale";

// A copy of `src` as dir/bad.gguf with the f16 `value` written at byte `at`.
std::string CopyWithF16At(const testing::TempDir& dir, const std::string& src, uint64_t at,
                          uint16_t value) {
  const std::string out = dir / "bad.gguf";
  std::filesystem::copy_file(src, out);
  std::fstream io(out, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(static_cast<std::streamoff>(at));
  const char bytes[2] = {static_cast<char>(value & 0xff), static_cast<char>(value >> 8)};
  io.write(bytes, 2);
  EXPECT_TRUE(io.good());
  return out;
}

// A copy of the tiny Q4_K_M model whose layer-1 up projection of expert 3 has an infinite
// f16 scale d in its sixth q4_K block.
std::string ModelWithAnInfiniteExpertScale(const testing::TempDir& dir) {
  const std::string src = testing::TinyQ4KMModelPath();
  GgufFile f(src);
  const GgufTensorInfo* info = f.FindTensorInfo("blk.1.ffn_up_exps.weight");
  EXPECT_NE(info, nullptr);
  const TensorView* t = f.FindQuantizedTensor("blk.1.ffn_up_exps.weight");
  EXPECT_EQ(t->dtype, DType::kQ4_K);
  const uint64_t expert_bytes = t->nbytes / static_cast<uint64_t>(t->shape[0]);
  // 144-byte q4_K blocks.
  return CopyWithF16At(dir, src, f.data_offset() + info->offset + 3 * expert_bytes + 5 * 144,
                       0x7c00);
}

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GgufExpertScaleCheck, OpeningDefersItAndPackingRefusesTheBlock) {
  const testing::TempDir dir;
  const std::string path = ModelWithAnInfiniteExpertScale(dir);
  // The file opens as a model: its experts' bytes are not read.
  const auto model = LoadModel(path);
  // The resident copy refuses it (the copies run on the thread pool; the error reaches here).
  EXPECT_NE(ErrorOf([&] { ResidentMoeExecutor resident(*model); }).find(kWant), std::string::npos);
  // So does packing the expert store, which leaves no store behind.
  OffloadOptions o;
  o.store_path = dir / "bad.moex";
  o.progress = false;
  EXPECT_NE(ErrorOf([&] { OffloadMoeExecutor offload(*model, o); }).find(kWant), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(o.store_path));
}

// A dense q8_0 matrix stays in its blocks for the kernels (int8 activations ran it to
// plausible tokens with a NaN scale); its scales are checked when the model loads.
TEST(GgufExpertScaleCheck, ADenseQ8MatrixWithANanScaleIsRefusedAtLoad) {
  const testing::TempDir dir;
  const std::string src = testing::TinyQuantModelPath(DType::kQ8_0);
  uint64_t at = 0;
  {
    GgufFile f(src);
    const GgufTensorInfo* info = f.FindTensorInfo("blk.0.attn_q.weight");
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(f.FindTensor("blk.0.attn_q.weight")->dtype, DType::kQ8_0);
    at = f.data_offset() + info->offset + 2 * 34;  // The third 34-byte block's f16 scale.
  }
  const std::string out = CopyWithF16At(dir, src, at, 0x7e01);  // A NaN.
  EXPECT_NE(ErrorOf([&] { LoadModel(out); })
                .find("q8_0 tensor 'blk.0.attn_q.weight' block 2 has a non-finite scale"),
            std::string::npos)
      << ErrorOf([&] { LoadModel(out); });
}

TEST(GgufExpertScaleCheck, TheUntouchedModelPacksAndRuns) {
  const auto model = LoadModel(testing::TinyQ4KMModelPath());
  EXPECT_NO_THROW(ResidentMoeExecutor resident(*model));
}

}  // namespace
}  // namespace moex

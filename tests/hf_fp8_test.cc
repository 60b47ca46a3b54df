// Block-scaled FP8 HF checkpoints (model/hf_fp8.h): the e4m3fn codec by hand, the block
// scales applied where they belong, and the clear errors (under ASan in CI: these read
// untrusted files). The logits: hf_fp8_logits_test.cc.
#include "model/hf_fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/model.h"
#include "model/random_model.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

TEST(Fp8E4M3, DecodesByHand) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x00), 0.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 0.001953125f);  // Smallest subnormal: 2^-9.
  EXPECT_EQ(Fp8E4M3ToFloat(0x07), 7 * 0.001953125f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), 0.015625f);  // Smallest normal: 2^-6.
  EXPECT_EQ(Fp8E4M3ToFloat(0x38), 1.0f);       // Exponent 7 = bias.
  EXPECT_EQ(Fp8E4M3ToFloat(0x39), 1.125f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x7E), 448.0f);  // Largest: 2^8 x 1.75.
  EXPECT_EQ(Fp8E4M3ToFloat(0xB0), -0.5f);
  EXPECT_EQ(Fp8E4M3ToFloat(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xFF)));
}

TEST(Fp8E4M3, EncodesToNearestTiesToEvenAndSaturates) {
  EXPECT_EQ(FloatToFp8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToFp8E4M3(-0.5f), 0xB0);
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);  // Halfway 1 / 1.125: the even code.
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3A);  // Halfway 1.125 / 1.25: the even code.
  EXPECT_EQ(FloatToFp8E4M3(1.06f), 0x38);    // Below the halfway point.
  EXPECT_EQ(FloatToFp8E4M3(1.07f), 0x39);    // Above it.
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(1e6f), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(-1e6f), 0xFE);
  EXPECT_EQ(FloatToFp8E4M3(0.0009765625f), 0x00);  // Half the smallest subnormal: to 0 (even).
  EXPECT_EQ(FloatToFp8E4M3(std::nanf("")), 0x7F);
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    const auto c = static_cast<uint8_t>(code);
    EXPECT_EQ(FloatToFp8E4M3(Fp8E4M3ToFloat(c)), code == 0x80 ? 0x80 : c) << code;
  }
}

// A tiny MiniMax-M2 checkpoint with FP8 weights in 16 x 16 blocks (several per matrix).
std::string WriteFp8Model(const fs::path& dir) {
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kMiniMaxM2, ModelSize::kTiny);
  o.seed = 3;
  o.hf_fp8_block = 16;
  o.out = (dir / "fp8").string();
  WriteRandomModel(o);
  return o.out;
}

// Every weight is code x its block's scale, rounded to bf16; the router and LM head stay as
// drawn; and the FP8 weights are within one e4m3 step of the unquantized draws.
TEST(HfFp8, WeightsAreCodesTimesTheirBlocksScale) {
  testing::TempDir temp;
  const std::string dir = WriteFp8Model(temp.path());
  const SafetensorsFile file(dir + "/model.safetensors");
  auto source = WrapFp8HfWeights(HfCheckpoint::Open(dir));
  const std::string name = "model.layers.1.block_sparse_moe.experts.3.w2.weight";
  const ByteTensor* codes = file.FindBytes(name);
  const TensorView* scales = file.Find(name + "_scale_inv");
  ASSERT_NE(codes, nullptr);
  ASSERT_EQ(codes->dtype, "F8_E4M3");
  ASSERT_NE(scales, nullptr);
  const TensorView* w = source->Find(name);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kBF16);
  EXPECT_EQ(w->shape, codes->shape);
  const int64_t cols = codes->shape[1], scale_cols = scales->shape[1];
  EXPECT_EQ(scales->shape, (std::vector<int64_t>{(codes->shape[0] + 15) / 16, (cols + 15) / 16}));
  for (const auto& [r, c] : {std::pair<int64_t, int64_t>{0, 0},
                             {0, 15},
                             {0, 16},
                             {15, 16},
                             {16, 0},
                             {codes->shape[0] - 1, cols - 1}}) {
    const auto code = static_cast<uint8_t>(codes->data[r * cols + c]);
    const float scale =
        reinterpret_cast<const float*>(scales->data)[(r / 16) * scale_cols + c / 16];
    const uint16_t got = reinterpret_cast<const uint16_t*>(w->data)[r * cols + c];
    EXPECT_EQ(got, F32ToBF16(Fp8E4M3ToFloat(code) * scale)) << r << "," << c;
  }
  // The scales are gone from the names; the FP8 weights are there.
  const std::vector<std::string> names = source->Names();
  EXPECT_EQ(std::count(names.begin(), names.end(), name), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), name + "_scale_inv"), 0);
  EXPECT_EQ(source->Find(name + "_scale_inv"), nullptr);
  EXPECT_TRUE(source->Unmapped().empty());
  // Unquantized: the router and the LM head.
  EXPECT_NE(file.Find("model.layers.0.block_sparse_moe.gate.weight"), nullptr);
  EXPECT_NE(file.Find("lm_head.weight"), nullptr);

  // Against the same draws unquantized (same seed): within half an e4m3 step (1/16 of the
  // value for normals) plus the bf16 roundings, or one subnormal step of the block's scale.
  RandomModelOptions plain;
  plain.config = RandomModelConfig(Arch::kMiniMaxM2, ModelSize::kTiny);
  plain.seed = 3;
  plain.out = (temp.path() / "plain").string();
  WriteRandomModel(plain);
  const SafetensorsFile plain_file(plain.out + "/model.safetensors");
  const TensorView* drawn = plain_file.Find(name);
  ASSERT_NE(drawn, nullptr);
  for (int64_t i = 0; i < drawn->numel(); ++i) {
    const float a = BF16ToF32(reinterpret_cast<const uint16_t*>(drawn->data)[i]);
    const float b = BF16ToF32(reinterpret_cast<const uint16_t*>(w->data)[i]);
    const float scale =
        reinterpret_cast<const float*>(scales->data)[(i / cols / 16) * scale_cols + i % cols / 16];
    EXPECT_LE(std::fabs(a - b), std::fabs(a) / 16 + std::fabs(a) / 64 + scale * 0.001953125f) << i;
  }
}

std::string LoadError(const std::string& dir) {
  return testing::ErrorOf([&] { LoadModel(dir); });
}

// A copy of the checkpoint at `dir` in `out` whose safetensors file `edit` rewrites.
void RewriteWeights(const std::string& dir, const std::string& out,
                    const std::function<void(const SafetensorsFile&, SafetensorsWriter&)>& edit) {
  fs::create_directories(out);
  for (const char* f : {"config.json", "generation_config.json"})
    fs::copy_file(fs::path(dir) / f, fs::path(out) / f, fs::copy_options::overwrite_existing);
  const SafetensorsFile file(dir + "/model.safetensors");
  SafetensorsWriter writer;
  edit(file, writer);
  writer.WriteCheckpoint(out);
}

void CopyAll(const SafetensorsFile& file, SafetensorsWriter& w, const std::string& skip) {
  for (const TensorView& t : file.tensors())
    if (t.name != skip) w.Add(t);
  for (const ByteTensor& b : file.byte_tensors()) {
    if (b.name == skip) continue;
    w.AddBytes(
        b.name, b.shape,
        [b](size_t offset, std::span<std::byte> out) {
          std::memcpy(out.data(), b.data + offset, out.size());
        },
        b.dtype.c_str());
  }
}

TEST(HfFp8, ClearErrors) {
  testing::TempDir temp;
  const std::string dir = WriteFp8Model(temp.path());
  const std::string w = "model.layers.0.self_attn.q_proj.weight";
  RewriteWeights(dir, temp / "no_scale", [&](const SafetensorsFile& f, SafetensorsWriter& out) {
    CopyAll(f, out, w + "_scale_inv");
  });
  EXPECT_NE(LoadError(temp / "no_scale").find("has no " + w + "_scale_inv"), std::string::npos)
      << LoadError(temp / "no_scale");
  static const std::vector<float> ones(64, 1.0f);
  RewriteWeights(dir, temp / "bad_scale", [&](const SafetensorsFile& f, SafetensorsWriter& out) {
    CopyAll(f, out, w + "_scale_inv");
    out.Add(w + "_scale_inv", DType::kF32, {1, 1}, ones.data());
  });
  EXPECT_NE(LoadError(temp / "bad_scale").find(w + "_scale_inv is f32 [1, 1], expected"),
            std::string::npos)
      << LoadError(temp / "bad_scale");
  RewriteWeights(dir, temp / "orphan", [&](const SafetensorsFile& f, SafetensorsWriter& out) {
    CopyAll(f, out, "");
    out.Add("model.layers.0.mlp.foo.weight_scale_inv", DType::kF32, {1, 1}, ones.data());
  });
  EXPECT_NE(LoadError(temp / "orphan")
                .find("model.layers.0.mlp.foo.weight_scale_inv scales no "
                      "FP8 weight"),
            std::string::npos)
      << LoadError(temp / "orphan");

  const nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  for (const auto& [key, value, message] :
       {std::tuple<const char*, nlohmann::json, const char*>{"fmt", "float8_e5m2", "fmt"},
        {"activation_scheme", "static", "activation_scheme"},
        {"weight_block_size", nullptr, "weight_block_size"},
        {"weight_block_size", nlohmann::json::array({128}), "weight_block_size"},
        {"quant_method", "gptq", "'gptq' is not supported"}}) {
    nlohmann::json c = config;
    c["quantization_config"][key] = value;
    const std::string bad = temp / (std::string("config_") + key);
    fs::create_directories(bad);
    fs::copy_file(dir + "/model.safetensors", bad + "/model.safetensors");
    std::ofstream(bad + "/config.json") << c.dump();
    EXPECT_NE(LoadError(bad).find(message), std::string::npos) << key << ": " << LoadError(bad);
    fs::remove_all(bad);
  }
}

}  // namespace
}  // namespace moex

// gpt-oss's published HF form: routed experts as MXFP4 _blocks/_scales with
// quantization_config. Hand-computed blocks (both nibble halves, the E8M0 exponent) and the
// gate/up de-interleave; the same random weights as HF-MXFP4 and as MXFP4 GGUF give the same
// expert bytes and bit-identical logits; offloaded == resident; malformed checkpoints are
// refused naming the tensor or the config field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/quant_format.h"
#include "engine/moe_executor.h"
#include "io/safetensors_writer.h"
#include "kernels/activation_precision.h"
#include "model/gguf_model.h"
#include "model/gpt_oss_weights.h"
#include "model/hf_checkpoint.h"
#include "model/hf_mxfp4.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/tensor_names.h"
#include "support/engine_runs.h"
#include "support/reference_model.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

// e2m1 codes: 1 = 0.5, 2 = 1, 7 = 6, 9 = -0.5, 0xA = -1, 0xC = -2, 0xF = -6.
TEST(HfMxfp4Block, HandComputedCodesAndExponentDecodeAsTransformersDoes) {
  uint8_t codes[16] = {};
  codes[0] = 0x21;   // Element 0 (low nibble) = 0.5, element 1 (high nibble) = 1.
  codes[7] = 0x9C;   // Element 14 = -2, element 15 = -0.5.
  codes[15] = 0xF7;  // Element 30 = 6, element 31 = -6.
  ASSERT_EQ(Info(QuantFormat::kMXFP4).block_bytes, kGgmlMxfp4BlockBytes);
  uint8_t block[17];
  HfToGgmlMxfp4Block(codes, 128, block);  // 2^(128 - 127) = 2.
  // GGML packs element j with element j + 16 in byte 1 + j.
  const uint8_t expected_block[17] = {128, 0x01, 0x02, 0, 0, 0, 0,    0,   0,
                                      0,   0,    0,    0, 0, 0, 0x7C, 0xF9};
  EXPECT_TRUE(std::equal(block, block + 17, expected_block));
  float y[32];
  Dequantize(QuantFormat::kMXFP4, block, 32, y);
  std::vector<float> want(32, 0.0f);
  want[0] = 1;
  want[1] = 2;
  want[14] = -4;
  want[15] = -1;
  want[30] = 12;
  want[31] = -12;
  EXPECT_EQ(std::vector<float>(y, y + 32), want);
  // A small exponent: 2^(125 - 127) = 1/4.
  HfToGgmlMxfp4Block(codes, 125, block);
  Dequantize(QuantFormat::kMXFP4, block, 32, y);
  EXPECT_EQ(y[1], 0.25f);
  EXPECT_EQ(y[31], -1.5f);
  // And back: the same codes and exponent.
  uint8_t back[16], scale = 0;
  GgmlToHfMxfp4Block(block, back, &scale);
  EXPECT_EQ(scale, 125);
  EXPECT_TRUE(std::equal(back, back + 16, codes));
}

// ---------------------------------------------------------------------------------------
// A hand-made checkpoint: layer 0's experts only (enough for the weight source).

struct HandCheckpoint {
  ModelConfig c = RandomModelConfig(Arch::kGptOss, ModelSize::kTiny);
  nlohmann::json config = c.ToHfJson();
  int64_t E = c.num_experts, d = c.hidden_size, F = c.moe_intermediate_size;
  std::vector<uint8_t> gu_blocks = std::vector<uint8_t>(E * 2 * F * (d / 32) * 16, 0);
  std::vector<uint8_t> gu_scales = std::vector<uint8_t>(E * 2 * F * (d / 32), 127);
  std::vector<uint8_t> dn_blocks = std::vector<uint8_t>(E * d * (F / 32) * 16, 0);
  std::vector<uint8_t> dn_scales = std::vector<uint8_t>(E * d * (F / 32), 127);
  bool write_gu_scales = true;
  std::vector<int64_t> gu_blocks_shape = {E, 2 * F, d / 32, 16};
  std::string extra_u8;  // Another U8 tensor to write.

  HandCheckpoint() {
    config["quantization_config"] = {{"quant_method", "mxfp4"},
                                     {"modules_to_not_convert",
                                      {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"}}};
    // Expert 1: gate row 1 = gate_up row 2, its second block (columns 32..63), exponent 128.
    const int64_t gu_row_blocks = d / 32;
    const int64_t gate_block = (1 * 2 * F + 2) * gu_row_blocks + 1;
    gu_blocks[gate_block * 16 + 0] = 0x21;  // Columns 32, 33: 0.5 and 1 times 2.
    gu_scales[gate_block] = 128;
    // Expert 1: up row 1 = gate_up row 3, first block, exponent 125.
    const int64_t up_block = (1 * 2 * F + 3) * gu_row_blocks;
    gu_blocks[up_block * 16 + 15] = 0xF7;  // Columns 30, 31: 6 and -6 times 1/4.
    gu_scales[up_block] = 125;
    // Expert 1: down row 5 (its only block), exponent 127.
    const int64_t down_block = 1 * d + 5;
    dn_blocks[down_block * 16 + 3] = 0x9A;  // Columns 6, 7: -1 and -0.5.
  }

  std::string Write(const testing::TempDir& temp) const {
    const std::string dir = temp / "ckpt";
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/config.json") << config.dump(2);
    SafetensorsWriter w;
    const std::string p = "model.layers.0.mlp.experts.";
    w.AddBytes(p + "gate_up_proj_blocks", gu_blocks_shape,
               FillFromMemory(gu_blocks.data(), gu_blocks.size()));
    if (write_gu_scales)
      w.AddBytes(p + "gate_up_proj_scales", {E, 2 * F, d / 32},
                 FillFromMemory(gu_scales.data(), gu_scales.size()));
    w.AddBytes(p + "down_proj_blocks", {E, d, F / 32, 16},
               FillFromMemory(dn_blocks.data(), dn_blocks.size()));
    w.AddBytes(p + "down_proj_scales", {E, d, F / 32},
               FillFromMemory(dn_scales.data(), dn_scales.size()));
    if (!extra_u8.empty()) w.AddBytes(extra_u8, {4}, FillFromMemory(dn_scales.data(), 4));
    w.WriteCheckpoint(dir);
    return dir;
  }
};

std::vector<float> Dequantized(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  Dequantize(QuantFormat::kMXFP4, reinterpret_cast<const uint8_t*>(t.data), t.numel(), out.data());
  return out;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GptOssHfMxfp4, HandComputedBlocksAreDeinterleavedIntoGateUpAndDown) {
  testing::TempDir temp;
  const HandCheckpoint h;
  auto w = WrapGptOssHfWeights(HfCheckpoint::Open(h.Write(temp)), h.c);
  const TensorNames n = TensorNamesFor(h.c);
  const TensorView& gate = w->Get(n.Expert(0, 1, ExpertMatrix::kGate), {h.F, h.d});
  const TensorView& up = w->Get(n.Expert(0, 1, ExpertMatrix::kUp), {h.F, h.d});
  const TensorView& down = w->Get(n.Expert(0, 1, ExpertMatrix::kDown), {h.d, h.F});
  for (const TensorView* t : {&gate, &up, &down}) EXPECT_EQ(t->dtype, DType::kMXFP4) << t->name;
  std::vector<float> want_gate(h.F * h.d, 0.0f), want_up(h.F * h.d, 0.0f),
      want_down(h.d * h.F, 0.0f);
  want_gate[1 * h.d + 32] = 1.0f;
  want_gate[1 * h.d + 33] = 2.0f;
  want_up[1 * h.d + 30] = 1.5f;
  want_up[1 * h.d + 31] = -1.5f;
  want_down[5 * h.F + 6] = -1.0f;
  want_down[5 * h.F + 7] = -0.5f;
  EXPECT_EQ(Dequantized(gate), want_gate);
  EXPECT_EQ(Dequantized(up), want_up);
  EXPECT_EQ(Dequantized(down), want_down);
  // The exponent byte travels unchanged: GGML block (row 1, block 1) of gate starts with 128.
  EXPECT_EQ(static_cast<uint8_t>(gate.data[(1 * (h.d / 32) + 1) * 17]), 128);
  // Other experts are all zero.
  const std::vector<float> zeros(h.F * h.d, 0.0f);
  EXPECT_EQ(Dequantized(w->Get(n.Expert(0, 0, ExpertMatrix::kGate))), zeros);
  EXPECT_EQ(Dequantized(w->Get(n.Expert(0, 2, ExpertMatrix::kUp))), zeros);
  // The U8 tensors are taken over: neither names of the source nor unread leftovers.
  EXPECT_TRUE(w->Unmapped().empty());
  const auto names = w->Names();
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& s) { return s.ends_with("_blocks"); }),
            0);
}

TEST(GptOssHfMxfp4, MalformedCheckpointsAreRefusedNamingTheTensor) {
  auto expect_error = [](const HandCheckpoint& h, const std::string& want, bool on_get = false) {
    testing::TempDir temp;
    const std::string e = ErrorOf([&] {
      auto w = WrapGptOssHfWeights(HfCheckpoint::Open(h.Write(temp)), h.c);
      if (on_get) w->Get(TensorNamesFor(h.c).Expert(0, 1, ExpertMatrix::kUp));
    });
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  {
    HandCheckpoint h;
    h.write_gu_scales = false;
    expect_error(h,
                 "MXFP4 tensor model.layers.0.mlp.experts.gate_up_proj_blocks has no "
                 "model.layers.0.mlp.experts.gate_up_proj_scales");
  }
  {
    HandCheckpoint h;
    h.gu_blocks_shape = {h.E, 2 * h.F, h.d / 16, 8};
    expect_error(h,
                 "MXFP4 tensor model.layers.0.mlp.experts.gate_up_proj_blocks has shape "
                 "[8, 64, 4, 8], expected [8, 64, 2, 16]");
  }
  {
    HandCheckpoint h;
    h.config["quantization_config"]["quant_method"] = "fp8";
    expect_error(h, "quantization_config.quant_method 'fp8' is not supported for gpt_oss");
  }
  {
    HandCheckpoint h;
    h.config["quantization_config"]["modules_to_not_convert"].push_back(
        "model.layers.*.mlp.experts");
    expect_error(h,
                 "modules_to_not_convert entry 'model.layers.*.mlp.experts' covers "
                 "model.layers.0.mlp.experts, but tensor "
                 "model.layers.0.mlp.experts.gate_up_proj_blocks stores its experts as MXFP4");
  }
  {
    HandCheckpoint h;
    h.config["quantization_config"]["modules_to_not_convert"].push_back("model.layers.0.mlp");
    expect_error(h, "entry 'model.layers.0.mlp' covers model.layers.0.mlp.experts");
  }
  {
    HandCheckpoint h;
    h.config["quantization_config"]["modules_to_not_convert"].push_back(
        "model.layers.0.mlp.experts.down_proj");
    expect_error(h,
                 "entry 'model.layers.0.mlp.experts.down_proj' names only part of "
                 "model.layers.0.mlp.experts");
  }
  {
    HandCheckpoint h;  // Entries that together name every expert matrix cover the experts.
    h.config["quantization_config"]["modules_to_not_convert"].push_back("*.experts.gate_up_proj");
    h.config["quantization_config"]["modules_to_not_convert"].push_back("*.experts.down_proj");
    expect_error(h,
                 "entry '*.experts.down_proj' covers model.layers.0.mlp.experts, but tensor "
                 "model.layers.0.mlp.experts.gate_up_proj_blocks stores its experts as MXFP4");
  }
  {
    HandCheckpoint h;
    h.config["quantization_config"]["modules_to_not_convert"] = "lm_head";
    expect_error(h, "quantization_config.modules_to_not_convert must be a list");
  }
  {
    HandCheckpoint h;
    h.config.erase("quantization_config");
    expect_error(h,
                 "tensor model.layers.0.mlp.experts.gate_up_proj_blocks holds MXFP4 experts, "
                 "but config.json has no quantization_config");
  }
  {
    HandCheckpoint h;
    h.extra_u8 = "model.layers.0.self_attn.q_proj.weight_blocks";
    expect_error(h, "U8 tensor(s) model.layers.0.self_attn.q_proj.weight_blocks are not MXFP4");
  }
  {
    HandCheckpoint h;  // NaN exponent in up row 1's block: found when the expert is read.
    h.gu_scales[(1 * 2 * h.F + 3) * (h.d / 32)] = 0xff;
    expect_error(h,
                 "MXFP4 tensor model.layers.0.mlp.experts.gate_up_proj_scales has exponent "
                 "0xFF (NaN) at expert 1, row 3, block 0",
                 true);
  }
  {
    HandCheckpoint h;  // quantization_config is gpt-oss's only.
    const nlohmann::json q = h.config["quantization_config"];
    h.config = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny).ToHfJson();
    h.config["quantization_config"] = q;
    expect_error(h,
                 "quantization_config (quant_method 'mxfp4') is supported for gpt_oss only, "
                 "not olmoe");
  }
}

// A bf16 checkpoint whose config.json claims MXFP4 experts contradicts itself.
TEST(GptOssHfMxfp4, UnquantisedExpertsUnderAnMxfp4ConfigAreRefused) {
  testing::TempDir temp;
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kGptOss, ModelSize::kTiny);
  o.out = temp / "m";
  WriteRandomModel(o);
  nlohmann::json config = ReadJsonFile(o.out + "/config.json");
  config["quantization_config"] = {{"quant_method", "mxfp4"}};
  std::ofstream(o.out + "/config.json") << config.dump();
  const std::string e = ErrorOf([&] { LoadModel(o.out); });
  EXPECT_NE(e.find("does not exclude model.layers.0.mlp.experts in modules_to_not_convert, but "
                   "tensor model.layers.0.mlp.experts.gate_up_proj stores its experts unquantised"),
            std::string::npos)
      << e;
}

// ---------------------------------------------------------------------------------------
// Random weights, both forms.

const std::vector<int32_t> kIds = {1, 17, 300, 42, 42, 511, 0, 99, 256, 7};

std::string RandomGptOss(const testing::TempDir& temp, const std::string& name, bool hf_mxfp4,
                         std::optional<DType> gguf_type = std::nullopt) {
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kGptOss, ModelSize::kTiny);
  o.seed = 3;
  o.hf_mxfp4 = hf_mxfp4;
  o.gguf_type = gguf_type;
  o.format = gguf_type ? "gguf" : "hf";
  o.out = temp / name;
  WriteRandomModel(o);
  return o.out;
}

TEST(GptOssHfMxfp4, RandomModelQuantisesTheExpertsAsTheMxfp4GgufDoes) {
  testing::TempDir temp;
  auto hf = LoadModel(RandomGptOss(temp, "hf", true));
  auto gguf = LoadModel(RandomGptOss(temp, "m.gguf", false, DType::kMXFP4));
  ASSERT_EQ(hf->expert_shape.gate_up, DType::kMXFP4);
  ASSERT_EQ(gguf->expert_shape.gate_up, DType::kMXFP4);
  for (int l = 0; l < hf->config.num_layers; ++l) {
    for (int e = 0; e < hf->config.num_experts; ++e) {
      const TensorView *hg, *hu, *hd, *gg, *gu, *gd;
      hf->ExpertTensors(l, e, &hg, &hu, &hd);
      gguf->ExpertTensors(l, e, &gg, &gu, &gd);
      for (auto [a, b] : {std::pair{hg, gg}, std::pair{hu, gu}, std::pair{hd, gd}}) {
        ASSERT_EQ(a->nbytes, b->nbytes);
        EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << a->name;
      }
    }
  }
}

TEST(GptOssHfMxfp4, SameWeightsAsMxfp4GgufGiveBitIdenticalLogitsAndOffloadLosslessly) {
  // The reference is the exact dot of the dequantised weights: f32 activations.
  const kernels::ScopedActivationPrecision f32_activations(kernels::ActivationPrecision::kF32);
  testing::TempDir temp;
  auto hf = LoadModel(RandomGptOss(temp, "hf", true));
  EXPECT_TRUE(hf->unused_tensors.empty()) << hf->unused_tensors.size();
  // The converter keeps the MXFP4 blocks as they are (and bf16 attention as bf16).
  const std::string path = temp / "m.gguf";
  WriteGgufModel(hf->config, *hf->weights, nullptr, path);
  auto gguf = LoadModel(path);
  ASSERT_EQ(gguf->expert_shape.gate_up, DType::kMXFP4);
  ResidentMoeExecutor hf_exec(*hf), gguf_exec(*gguf);
  const std::vector<float> logits = testing::PrefillLogits(*hf, hf_exec, kIds);
  EXPECT_EQ(testing::PrefillLogits(*gguf, gguf_exec, kIds), logits);
  // The double reference on the same blocks.
  const std::vector<double> ref = testing::ReferenceLogits(hf->config, *hf->weights, kIds);
  const testing::LogitGap gap = testing::CompareLogits(logits, ref);
  EXPECT_LT(gap.max_err, 1e-4 * gap.scale) << gap.max_err << " of " << gap.scale;
  for (const char* budget : {"5%", "50%"}) {
    const std::string store = temp / "experts.moex";
    EXPECT_EQ(testing::OffloadedPrefillLogits(*hf, kIds, store, budget), logits) << budget;
  }
}

TEST(GptOssHfMxfp4, RandomModelRefusesHfMxfp4OutsideGptOssHf) {
  testing::TempDir temp;
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  o.hf_mxfp4 = true;
  o.out = temp / "m";
  EXPECT_NE(ErrorOf([&] { WriteRandomModel(o); }).find("--hf-mxfp4 applies to gpt_oss"),
            std::string::npos);
  o.config = RandomModelConfig(Arch::kGptOss, ModelSize::kTiny);
  o.format = "gguf";
  EXPECT_NE(ErrorOf([&] { WriteRandomModel(o); }).find("--gguf-type mxfp4"), std::string::npos);
}

}  // namespace
}  // namespace moex

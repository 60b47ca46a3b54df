// llama.cpp's per-matrix `.scale` tensors (they come with NVFP4 files): where llama.cpp's
// graph for the architecture multiplies a matmul's output by one, moex does the same; where
// it loads one but never applies it, the file is refused by name (docs/formats.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "engine/moe_executor.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "kernels/activation_precision.h"
#include "model/model.h"
#include "model/random_model.h"

#include "support/engine_runs.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

const std::vector<int32_t> kIds = {1, 17, 300, 42, 42, 511, 0, 99, 256, 7};

using Scales = std::map<std::string, std::vector<float>>;  // GGUF .scale name -> values.

// `bytes` (row-major [parts, ...] in `dtype`, parts equal slices) with slice p multiplied by
// s[p], or every element by s[0]. Exact for powers of two: bf16/f16/f32 values and q8_0's
// f16 block scales only change exponent.
void MultiplyInPlace(DType dtype, std::vector<std::byte>& bytes, const std::vector<float>& s) {
  const size_t parts = s.size(), slice = bytes.size() / parts;
  for (size_t p = 0; p < parts; ++p) {
    std::byte* b = bytes.data() + p * slice;
    switch (dtype) {
      case DType::kF32:
        for (size_t i = 0; i < slice; i += 4) {
          float v;
          std::memcpy(&v, b + i, 4);
          v *= s[p];
          std::memcpy(b + i, &v, 4);
        }
        break;
      case DType::kBF16:
        for (size_t i = 0; i < slice; i += 2) {
          uint16_t h;
          std::memcpy(&h, b + i, 2);
          h = F32ToBF16(BF16ToF32(h) * s[p]);
          std::memcpy(b + i, &h, 2);
        }
        break;
      case DType::kQ8_0:
        for (size_t i = 0; i < slice; i += DTypeBytes(DType::kQ8_0, kQ8BlockSize)) {
          uint16_t h;
          std::memcpy(&h, b + i, 2);
          h = F32ToF16(F16ToF32(h) * s[p]);
          std::memcpy(b + i, &h, 2);
        }
        break;
      default:
        FAIL() << "no exact multiply for " << DTypeName(dtype);
    }
  }
}

// A copy of the GGUF at `in`: with `fold`, each tensor X.weight whose X.scale is in `scales`
// is multiplied by it (no scale tensor); without, the scale tensors are added as F32.
void WriteScaled(const std::string& in, const std::string& out, const Scales& scales, bool fold) {
  const GgufFile f(in);
  GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.Set(k, v);
  std::deque<std::vector<std::byte>> owned;
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    const TensorView* t = f.FindQuantizedTensor(info.name);
    const std::byte* data = t->data;
    const std::string stem = info.name.substr(0, info.name.rfind('.'));
    const auto scale = scales.find(stem + ".scale");
    if (fold && scale != scales.end() && info.name.ends_with(".weight")) {
      auto& bytes = owned.emplace_back(t->data, t->data + t->nbytes);
      MultiplyInPlace(t->dtype, bytes, scale->second);
      data = bytes.data();
    }
    w.AddTensor(info.name, t->dtype, t->shape, data);
  }
  if (!fold) {
    for (const auto& [name, values] : scales)
      w.AddTensor(name, DType::kF32, {static_cast<int64_t>(values.size())}, values.data());
  }
  w.Write(out);
}

// Logits of kIds in one pass, then of one token alone (the decode kernels' path).
std::vector<float> Logits(const std::string& path) {
  const auto model = LoadModel(path);
  ResidentMoeExecutor resident(*model);
  std::vector<float> logits = testing::PrefillLogits(*model, resident, kIds);
  const std::vector<float> one = testing::PrefillLogits(*model, resident, {42});
  logits.insert(logits.end(), one.begin(), one.end());
  return logits;
}

// Powers of two, different per expert, so a scale applied to the wrong expert shows.
std::vector<float> PerExpert(int experts, int shift) {
  std::vector<float> s(static_cast<size_t>(experts));
  for (int e = 0; e < experts; ++e)
    s[static_cast<size_t>(e)] = std::ldexp(1.0f, (e + shift) % 5 - 2);
  return s;
}

// The scales llama.cpp's graph applies for `arch` (de3ff81, src/models/*.cpp): q/k/v via
// build_qkv (not on the MLA path), attn_output via build_attn, output everywhere, and the
// routed experts' only in the llama (Mixtral) and qwen3moe graphs.
Scales AppliedScales(const ModelConfig& c, const GgufFile& f) {
  Scales s;
  if (f.FindTensorInfo("output.weight") != nullptr) s["output.scale"] = {2.0f};
  const bool experts = c.arch == Arch::kMixtral || c.arch == Arch::kQwen3Moe;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    s[blk + "attn_q.scale"] = {2.0f};
    s[blk + "attn_k.scale"] = {0.5f};
    s[blk + "attn_v.scale"] = {4.0f};
    s[blk + "attn_output.scale"] = {0.25f};
    if (experts && c.IsMoeLayer(l)) {
      s[blk + "ffn_gate_exps.scale"] = PerExpert(c.num_experts, l);
      s[blk + "ffn_up_exps.scale"] = PerExpert(c.num_experts, l + 1);
      s[blk + "ffn_down_exps.scale"] = PerExpert(c.num_experts, l + 3);
    }
  }
  return s;
}

// A tiny random `arch` model (its matrices in `blocks`, else bf16) at dir/plain.gguf.
ModelConfig WritePlain(Arch arch, std::optional<DType> blocks, const std::string& dir) {
  RandomModelOptions o;
  o.config = arch == Arch::kDeepseekV2 ? RandomModelConfig(arch, ModelSize::kTiny)
                                       : RandomModelConfig(arch, ModelSize::kTiny);
  o.format = "gguf";
  o.gguf_type = blocks;
  o.out = dir + "/plain.gguf";
  WriteRandomModel(o);
  return o.config;
}

// dir/plain.gguf with the scales llama.cpp applies added (scaled.gguf) or multiplied into
// their matrices (folded.gguf).
void WriteScaledAndFolded(const ModelConfig& c, const std::string& dir) {
  const Scales scales = AppliedScales(c, GgufFile(dir + "/plain.gguf"));
  WriteScaled(dir + "/plain.gguf", dir + "/scaled.gguf", scales, /*fold=*/false);
  WriteScaled(dir + "/plain.gguf", dir + "/folded.gguf", scales, /*fold=*/true);
}

struct ScaleCase {
  Arch arch;
  DType dtype;
};

void PrintTo(const ScaleCase& c, std::ostream* os) {
  *os << ArchName(c.arch) << " " << DTypeName(c.dtype);
}

class ScaleTensors : public ::testing::TestWithParam<ScaleCase> {};

// A file with scales gives exactly the logits of the same file with each scale multiplied
// into its matrix (powers of two: both ways are exact), the scales change the logits, and
// offloading keeps the bits.
TEST_P(ScaleTensors, MultiplyTheirMatmulsOutputLikeLlamaCpp) {
  const ScaleCase p = GetParam();
  testing::TempDir temp;
  const std::string dir = temp.path().string();
  const ModelConfig c =
      WritePlain(p.arch, p.dtype == DType::kQ8_0 ? std::optional(DType::kQ8_0) : std::nullopt, dir);
  WriteScaledAndFolded(c, dir);

  const auto model = LoadModel(temp / "scaled.gguf");
  EXPECT_EQ(model->layers[0].q_scale, 2.0f);
  EXPECT_EQ(model->layers[0].o_scale, 0.25f);
  const std::vector<float> scaled = Logits(temp / "scaled.gguf");
  EXPECT_EQ(scaled, Logits(temp / "folded.gguf"));
  EXPECT_NE(scaled, Logits(temp / "plain.gguf"));
  const std::vector<float> prompt(scaled.begin(),
                                  scaled.end() - static_cast<int64_t>(model->config.vocab_size));
  for (const char* budget : {"5%", "50%"}) {
    EXPECT_EQ(testing::OffloadedPrefillLogits(*model, kIds, temp / "experts.moex", budget), prompt)
        << budget;
  }
}

INSTANTIATE_TEST_SUITE_P(ArchsAndDtypes, ScaleTensors,
                         ::testing::Values(ScaleCase{Arch::kMixtral, DType::kBF16},
                                           ScaleCase{Arch::kMixtral, DType::kQ8_0},
                                           ScaleCase{Arch::kQwen3Moe, DType::kBF16},
                                           ScaleCase{Arch::kOlmoe, DType::kQ8_0}),
                         [](const auto& info) {
                           return std::string(ArchName(info.param.arch)) + "_" +
                                  DTypeName(info.param.dtype);
                         });

// With f32 activations too (the q8_0 experts then run the block kernels' f32 path).
TEST(ScaleTensorsF32Activations, MixtralQ8_0) {
  const kernels::ScopedActivationPrecision f32(kernels::ActivationPrecision::kF32);
  testing::TempDir temp;
  const std::string dir = temp.path().string();
  WriteScaledAndFolded(WritePlain(Arch::kMixtral, DType::kQ8_0, dir), dir);
  EXPECT_EQ(Logits(temp / "scaled.gguf"), Logits(temp / "folded.gguf"));
}

std::string LoadError(const std::string& path) {
  try {
    LoadModel(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

// Scales llama.cpp loads but does not multiply in for the architecture, and input scales
// (loaded, never used), cannot change its result: the file loads and computes as without
// them, whatever their values.
TEST(ScaleTensorsIgnored, WhereLlamaCppLoadsButNeverAppliesThem) {
  testing::TempDir temp;
  const std::vector<std::pair<Arch, std::string>> cases = {
      {Arch::kOlmoe, "blk.1.ffn_down_exps.scale"},
      {Arch::kPhiMoe, "blk.0.ffn_gate_exps.scale"},
      {Arch::kQwen2Moe, "blk.0.ffn_up_shexp.scale"},
      {Arch::kDeepseekV2, "blk.0.attn_output.input_scale"},
      {Arch::kMixtral, "blk.0.attn_q.input_scale"},
  };
  for (const auto& [arch, name] : cases) {
    SCOPED_TRACE(name);
    const ModelConfig config = WritePlain(arch, std::nullopt, temp.path().string());
    Scales s;
    s[name] = std::vector<float>(
        name.find("_exps.") != std::string::npos ? static_cast<size_t>(config.num_experts) : 1,
        3.0f);
    WriteScaled(temp / "plain.gguf", temp / "extra.gguf", s, false);
    EXPECT_EQ(Logits(temp / "extra.gguf"), Logits(temp / "plain.gguf"));
  }
}

// Scales moex applies are refused naming the tensor when misshapen or non-finite.
TEST(ScaleTensorsRefused, WhenMalformed) {
  testing::TempDir temp;
  struct Case {
    std::string name;
    std::vector<float> values;
    std::string message;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {"blk.0.attn_q.scale", {1.0f, 1.0f}, "has shape [2], expected [1]"},
      {"blk.0.ffn_up_exps.scale", {1.0f}, "expected ["},
      {"output.scale", {nan}, "non-finite scale"},
      {"blk.2.attn_k.scale", {std::numeric_limits<float>::infinity()}, "non-finite scale"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    WritePlain(Arch::kMixtral, std::nullopt, temp.path().string());
    Scales s;
    s[c.name] = c.values;
    WriteScaled(temp / "plain.gguf", temp / "extra.gguf", s, false);
    const std::string error = LoadError(temp / "extra.gguf");
    EXPECT_NE(error.find(c.name), std::string::npos) << error;
    EXPECT_NE(error.find(c.message), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace moex

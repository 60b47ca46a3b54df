// DeepSeek-V2/V3 as llama.cpp's "deepseek2" GGUF: the keys llama.cpp reads, kv_b_proj split
// into attn_k_b / attn_v_b and joined back, the gate bias as exp_probs_b, the same logits
// from the GGUF as from the HF checkpoint, and multi-token-prediction blocks skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/moe_executor.h"
#include "io/gguf_writer.h"
#include "model/gguf_model.h"
#include "model/hf_checkpoint.h"
#include "model/model.h"
#include "model/tensor_names.h"
#include "support/engine_runs.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

const std::vector<int32_t> kIds = {1, 17, 300, 42, 42, 511, 0, 99, 256, 7};

std::vector<float> Logits(const Model& model) {
  ResidentMoeExecutor executor(model);
  return testing::PrefillLogits(model, executor, kIds);
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double{a[i]} - b[i]));
  return m;
}

class DeepseekGguf : public ::testing::TestWithParam<Arch> {
 protected:
  moex::testing::TempDir temp_;
};

TEST_P(DeepseekGguf, LlamaCppKeysAndTensorsWithTheCheckpointsLogits) {
  const std::string dir = testing::TinyModelPath(GetParam());
  auto hf = LoadModel(dir);
  const ModelConfig& c = hf->config;
  const std::string path = (temp_.path() / "m.gguf").string();
  WriteGgufModel(c, *hf->weights, nullptr, path);

  const GgufFile f(path);
  EXPECT_EQ(f.GetString("general.architecture"), "deepseek2");
  const Mla& m = *c.mla;
  EXPECT_EQ(f.GetInt("deepseek2.attention.head_count_kv"), 1);
  EXPECT_EQ(f.GetInt("deepseek2.attention.key_length"), m.kv_lora_rank + m.qk_rope_head_dim);
  EXPECT_EQ(f.GetInt("deepseek2.attention.value_length"), m.kv_lora_rank);
  EXPECT_EQ(f.GetInt("deepseek2.attention.key_length_mla"), m.qk_head_dim());
  EXPECT_EQ(f.GetInt("deepseek2.attention.value_length_mla"), m.v_head_dim);
  EXPECT_EQ(f.GetInt("deepseek2.rope.dimension_count"), m.qk_rope_head_dim);
  EXPECT_EQ(f.GetString("deepseek2.rope.scaling.type"), "yarn");
  EXPECT_NEAR(f.GetFloat("deepseek2.rope.scaling.yarn_log_multiplier"),
              0.1 * c.yarn->mscale_all_dim, 1e-7);
  EXPECT_EQ(f.GetInt("deepseek2.attention.q_lora_rank"), m.q_lora_rank);
  EXPECT_EQ(f.GetInt("deepseek2.expert_gating_func"),
            c.scoring_func == ScoringFunc::kSigmoid ? 2 : 1);
  // llama.cpp's split up-projection: k_b [H, L, nope] (GGUF ne reversed), v_b [H, v, L].
  const GgufTensorInfo* k_b = f.FindTensorInfo("blk.0.attn_k_b.weight");
  const GgufTensorInfo* v_b = f.FindTensorInfo("blk.0.attn_v_b.weight");
  ASSERT_NE(k_b, nullptr);
  ASSERT_NE(v_b, nullptr);
  EXPECT_EQ(k_b->shape(), (std::vector<int64_t>{c.num_heads, m.kv_lora_rank, m.qk_nope_head_dim}));
  EXPECT_EQ(v_b->shape(), (std::vector<int64_t>{c.num_heads, m.v_head_dim, m.kv_lora_rank}));
  EXPECT_EQ(f.FindTensorInfo("blk.0.attn_kv_b.weight"), nullptr);
  EXPECT_EQ(f.FindTensorInfo("blk.1.exp_probs_b.bias") != nullptr,
            c.topk_method == TopKMethod::kNoauxTc);

  auto gguf = LoadModel(path);
  // mscale_all_dim travels as 0.1 * mscale_all_dim in f32 (llama.cpp's key): near, not exact.
  ModelConfig read = gguf->config;
  EXPECT_NEAR(read.yarn->mscale_all_dim, c.yarn->mscale_all_dim, 1e-6);
  read.yarn->mscale_all_dim = c.yarn->mscale_all_dim;
  if (c.yarn->mscale == c.yarn->mscale_all_dim) read.yarn->mscale = c.yarn->mscale;
  EXPECT_EQ(read.ToHfJson(), c.ToHfJson());
  // The joined kv_b_proj holds the checkpoint's values (bf16, widened exactly).
  const TensorView& joined = gguf->weights->Get("model.layers.0.self_attn.kv_b_proj.weight");
  const std::vector<float> want =
      TensorToF32(hf->weights->Get("model.layers.0.self_attn.kv_b_proj.weight"));
  EXPECT_EQ(TensorToF32(joined), want);
  // The model itself multiplies the split tensors as stored: no copy, the file's dtype.
  const DType stored = hf->weights->Get("model.layers.0.self_attn.kv_b_proj.weight").dtype;
  for (const MlaHeads* half : {&gguf->layers[0].mla_k_up, &gguf->layers[0].mla_v_up}) {
    EXPECT_TRUE(half->owned.empty());
    EXPECT_EQ(half->dtype, stored);
  }
  EXPECT_LT(MaxDiff(Logits(*hf), Logits(*gguf)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Archs, DeepseekGguf,
                         ::testing::Values(Arch::kDeepseekV2, Arch::kDeepseekV3),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

// A copy of `src` with one more block (a multi-token-prediction block: one tensor,
// blk.{n}.nextn.eh_proj) and nextn_predict_layers = 1, as llama.cpp files of V3 have.
void AddMtpBlock(const std::string& src, const std::string& dst) {
  const GgufFile f(src);
  GgufWriter w;
  const int64_t n = f.GetInt("deepseek2.block_count");
  for (const auto& [key, value] : f.metadata()) w.Set(key, value);
  w.Set("deepseek2.block_count", GgufValue::U32(static_cast<uint32_t>(n + 1)));
  w.Set("deepseek2.nextn_predict_layers", GgufValue::U32(1));
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    const TensorView* t = f.FindTensor(info.name);
    w.AddTensor(info.name, t->dtype, t->shape, t->data);
  }
  const TensorView* norm = f.FindTensor("output_norm.weight");
  w.AddTensor("blk." + std::to_string(n) + ".nextn.eh_proj.weight", norm->dtype, norm->shape,
              norm->data);
  w.Write(dst);
}

TEST(DeepseekGgufMtp, BlocksBeyondTheLayersAreSkipped) {
  moex::testing::TempDir temp;
  auto hf = LoadModel(testing::TinyModelPath(Arch::kDeepseekV3));
  const std::string plain = (temp.path() / "plain.gguf").string();
  const std::string mtp = (temp.path() / "mtp.gguf").string();
  WriteGgufModel(hf->config, *hf->weights, nullptr, plain);
  AddMtpBlock(plain, mtp);
  auto model = LoadModel(mtp);
  EXPECT_EQ(model->config.num_layers, hf->config.num_layers);
  EXPECT_EQ(model->config.num_nextn_predict_layers, 1);
  EXPECT_LT(MaxDiff(Logits(*hf), Logits(*model)), 1e-5);
}

// Older llama.cpp files: one attn_kv_b [H * (nope + v), L] tensor and the decompressed head
// sizes in key_length / value_length (no *_mla keys). Built here from a current file.
void ToLegacyLayout(const std::string& src, const std::string& dst, const ModelConfig& c,
                    const WeightSource& hf, bool keep_split = false) {
  const GgufFile f(src);
  GgufWriter w;
  const Mla& m = *c.mla;
  for (const auto& [key, value] : f.metadata()) {
    if (key.ends_with("_mla")) continue;
    w.Set(key, value);
  }
  w.Set("deepseek2.attention.key_length", GgufValue::U32(static_cast<uint32_t>(m.qk_head_dim())));
  w.Set("deepseek2.attention.value_length", GgufValue::U32(static_cast<uint32_t>(m.v_head_dim)));
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    if (!keep_split &&
        (info.name.ends_with("attn_k_b.weight") || info.name.ends_with("attn_v_b.weight")))
      continue;
    const TensorView* t = f.FindTensor(info.name);
    w.AddTensor(info.name, t->dtype, t->shape, t->data);
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const TensorView& kv_b = hf.Get(TensorNames::Layer(l, "self_attn.kv_b_proj.weight"));
    w.AddTensor("blk." + std::to_string(l) + ".attn_kv_b.weight", kv_b.dtype, kv_b.shape,
                kv_b.data);
  }
  w.Write(dst);
}

TEST(DeepseekGgufLegacy, UnsplitKvBAndOldKeyLengthsGiveTheSameModel) {
  moex::testing::TempDir temp;
  auto hf = LoadModel(testing::TinyModelPath(Arch::kDeepseekV2));
  const std::string current = (temp.path() / "current.gguf").string();
  const std::string legacy = (temp.path() / "legacy.gguf").string();
  WriteGgufModel(hf->config, *hf->weights, nullptr, current);
  ToLegacyLayout(current, legacy, hf->config, *hf->weights);
  auto model = LoadModel(legacy);
  EXPECT_EQ(model->config.mla->qk_nope_head_dim, hf->config.mla->qk_nope_head_dim);
  EXPECT_EQ(model->config.mla->v_head_dim, hf->config.mla->v_head_dim);
  EXPECT_LT(MaxDiff(Logits(*hf), Logits(*model)), 1e-5);
  // A file with both forms is refused (llama.cpp would leave one of them unused).
  const std::string both = (temp.path() / "both.gguf").string();
  ToLegacyLayout(current, both, hf->config, *hf->weights, true);
  try {
    LoadModel(both);
    ADD_FAILURE() << "a file with attn_kv_b and attn_k_b/attn_v_b loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_b_proj"), std::string::npos) << e.what();
  }
}

TEST(DeepseekGgufErrors, MissingMlaKeysAreNamed) {
  moex::testing::TempDir temp;
  auto hf = LoadModel(testing::TinyModelPath(Arch::kDeepseekV2));
  const std::string plain = (temp.path() / "plain.gguf").string();
  WriteGgufModel(hf->config, *hf->weights, nullptr, plain);
  const GgufFile f(plain);
  for (const char* key : {"deepseek2.attention.kv_lora_rank", "deepseek2.rope.dimension_count"}) {
    GgufWriter w;
    for (const auto& [k, value] : f.metadata())
      if (k != key) w.Set(k, value);
    const std::string path = (temp.path() / "broken.gguf").string();
    w.Write(path);
    try {
      OpenGgufModel(path);
      ADD_FAILURE() << "no error without " << key;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace moex

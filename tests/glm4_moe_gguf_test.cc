// GLM-4.5 / 4.5-Air / 4.7 as llama.cpp's "glm4moe" GGUF: the keys its converter writes
// (rope.dimension_count as the rotary part, the sigmoid gate, shared and leading dense
// blocks), its tensor names (post_attention_norm, exp_probs_b), the same logits from the
// GGUF as from the HF checkpoint, MTP blocks skipped and a softmax gate refused.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/moe_executor.h"
#include "io/gguf_writer.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/random_model.h"
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
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::abs(double{a[i]} - b[i]));
  return m;
}

// The tiny GLM-4.5-Air shape, and GLM-4.5's variant (q/k norm, scale 2.5) with groups.
std::string TinyPath(bool glm45, const testing::TempDir& temp) {
  if (!glm45) return testing::TinyModelPath(Arch::kGlm4Moe);
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kGlm4Moe, ModelSize::kTiny);
  o.config.qk_norm = o.config.qk_norm_per_head = true;
  o.config.routed_scaling_factor = 2.5f;
  o.config.n_group = 4;
  o.config.topk_group = 2;
  o.config.num_experts_per_tok = 4;
  o.seed = 5;
  o.out = (temp.path() / "glm45").string();
  WriteRandomModel(o);
  return o.out;
}

class Glm4MoeGguf : public ::testing::TestWithParam<bool> {
 protected:
  moex::testing::TempDir temp_;
};

TEST_P(Glm4MoeGguf, LlamaCppKeysAndTensorsWithTheCheckpointsLogits) {
  auto hf = LoadModel(TinyPath(GetParam(), temp_));
  const ModelConfig& c = hf->config;
  const std::string path = (temp_.path() / "m.gguf").string();
  WriteGgufModel(c, *hf->weights, nullptr, path);

  const GgufFile f(path);
  EXPECT_EQ(f.GetString("general.architecture"), "glm4moe");
  EXPECT_EQ(f.GetInt("glm4moe.block_count"), c.num_layers);
  EXPECT_EQ(f.GetInt("glm4moe.rope.dimension_count"), c.head_dim / 2);
  EXPECT_EQ(f.GetInt("glm4moe.attention.key_length"), c.head_dim);
  EXPECT_EQ(f.GetInt("glm4moe.feed_forward_length"), c.intermediate_size);
  EXPECT_EQ(f.GetInt("glm4moe.expert_feed_forward_length"), c.moe_intermediate_size);
  EXPECT_EQ(f.GetInt("glm4moe.leading_dense_block_count"), 1);
  EXPECT_EQ(f.GetInt("glm4moe.expert_shared_count"), 1);
  EXPECT_EQ(f.GetInt("glm4moe.expert_gating_func"), 2);
  EXPECT_FLOAT_EQ(static_cast<float>(f.GetFloat("glm4moe.expert_weights_scale")),
                  c.routed_scaling_factor);
  EXPECT_TRUE(f.GetBool("glm4moe.expert_weights_norm", false));
  EXPECT_EQ(f.Find("glm4moe.expert_group_count") != nullptr, c.n_group > 1);
  // llama.cpp's names: the FFN input norm is post_attention_norm, the bias exp_probs_b.
  for (const char* name :
       {"blk.0.attn_norm.weight", "blk.0.post_attention_norm.weight", "blk.0.attn_q.bias",
        "blk.0.attn_k.bias", "blk.0.attn_v.bias", "blk.0.ffn_gate.weight", "blk.0.ffn_down.weight",
        "blk.1.ffn_gate_inp.weight", "blk.1.exp_probs_b.bias", "blk.1.ffn_gate_exps.weight",
        "blk.1.ffn_up_shexp.weight", "blk.2.ffn_down_shexp.weight", "output.weight"})
    EXPECT_NE(f.FindTensorInfo(name), nullptr) << name;
  EXPECT_EQ(f.FindTensorInfo("blk.0.ffn_norm.weight"), nullptr);
  EXPECT_EQ(f.FindTensorInfo("blk.0.attn_output.bias"), nullptr);
  EXPECT_EQ(f.FindTensorInfo("blk.0.attn_q_norm.weight") != nullptr, c.qk_norm);

  auto gguf = LoadModel(path);
  EXPECT_EQ(gguf->config.ToHfJson(), c.ToHfJson());
  EXPECT_LT(MaxDiff(Logits(*hf), Logits(*gguf)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Glm4MoeGguf, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Glm45" : "Air"; });

// A copy of `src` with its keys changed by `edit` and, when `mtp`, one more block (one
// tensor, blk.{n}.nextn.eh_proj) with nextn_predict_layers = 1, as llama.cpp's GLM files.
void Rewrite(const std::string& src, const std::string& dst, bool mtp,
             const std::function<void(GgufWriter&)>& edit = {}) {
  const GgufFile f(src);
  GgufWriter w;
  const int64_t n = f.GetInt("glm4moe.block_count");
  for (const auto& [key, value] : f.metadata()) w.Set(key, value);
  if (mtp) {
    w.Set("glm4moe.block_count", GgufValue::U32(static_cast<uint32_t>(n + 1)));
    w.Set("glm4moe.nextn_predict_layers", GgufValue::U32(1));
  }
  if (edit) edit(w);
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    const TensorView* t = f.FindTensor(info.name);
    w.AddTensor(info.name, t->dtype, t->shape, t->data);
  }
  if (mtp) {
    const TensorView* norm = f.FindTensor("output_norm.weight");
    w.AddTensor("blk." + std::to_string(n) + ".nextn.eh_proj.weight", norm->dtype, norm->shape,
                norm->data);
  }
  w.Write(dst);
}

TEST(Glm4MoeGgufFile, MtpBlocksAreSkippedAndOtherGatesRefused) {
  moex::testing::TempDir temp;
  auto hf = LoadModel(testing::TinyModelPath(Arch::kGlm4Moe));
  const std::string plain = (temp.path() / "plain.gguf").string();
  const std::string mtp = (temp.path() / "mtp.gguf").string();
  WriteGgufModel(hf->config, *hf->weights, nullptr, plain);
  Rewrite(plain, mtp, true);
  auto model = LoadModel(mtp);
  EXPECT_EQ(model->config.num_layers, hf->config.num_layers);
  EXPECT_EQ(model->config.num_nextn_predict_layers, 1);
  EXPECT_LT(MaxDiff(Logits(*hf), Logits(*model)), 1e-5);

  const std::string softmax = (temp.path() / "softmax.gguf").string();
  Rewrite(plain, softmax, false,
          [](GgufWriter& w) { w.Set("glm4moe.expert_gating_func", GgufValue::U32(1)); });
  try {
    LoadModel(softmax);
    ADD_FAILURE() << "a softmax-gated glm4moe file loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("glm4moe.expert_gating_func 1"), std::string::npos)
        << e.what();
  }
  const std::string rot = (temp.path() / "rot.gguf").string();
  Rewrite(plain, rot, false,
          [](GgufWriter& w) { w.Set("glm4moe.rope.dimension_count", GgufValue::U32(6)); });
  EXPECT_EQ(LoadModel(rot)->config.RotaryDim(), 6);  // Read, not assumed to be half.
}

TEST(Glm4MoeGgufFile, RandomModelWritesGguf) {
  moex::testing::TempDir temp;
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kGlm4Moe, ModelSize::kTiny);
  o.format = "gguf";
  o.out = (temp.path() / "r.gguf").string();
  WriteRandomModel(o);
  auto model = LoadModel(o.out);
  EXPECT_EQ(model->config.arch, Arch::kGlm4Moe);
  EXPECT_EQ(model->config.RotaryDim(), 8);
  // The same seed's HF checkpoint gives the same logits.
  EXPECT_LT(MaxDiff(Logits(*LoadModel(testing::TinyModelPath(Arch::kGlm4Moe, DType::kBF16, 0))),
                    Logits(*model)),
            1e-5);
}

}  // namespace
}  // namespace moex

// The walk-through of docs/design.md ("Adding a model family"), kept honest: a family defined
// here, outside src/, in one class and one registration, loads from HF and GGUF files and
// computes what the double-precision reference computes. Beside it, every family (built-in
// and this one) passes the same conformance checks on its adapter.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "model/arch/family.h"
#include "model/arch/hf_config_keys.h"
#include "model/gguf_arch_keys.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/random_model.h"
#include "support/reference_model.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

// A made-up family: Mixtral's routing (softmax over the top-k, renormalised or not as the
// config says), per-head q/k RMSNorm as Qwen3, and its own tensor names and config keys.
constexpr Arch kSampleArch = static_cast<Arch>(1000);

class SampleFamily : public Family {
 public:
  SampleFamily()
      : Family({kSampleArch, "sample_moe", "SampleMoeForCausalLM", "sample-moe", {"sample"}}, {}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    c.num_experts = hf_keys::RequireInt(j, "num_local_experts");
    c.num_experts_per_tok = hf_keys::RequireInt(j, "num_experts_per_tok");
    c.moe_intermediate_size = hf_keys::RequireInt(j, "expert_intermediate_size");
    c.norm_topk_prob = hf_keys::OptionalBool(j, "norm_topk_prob", true);
    c.qk_norm = c.qk_norm_per_head = hf_keys::OptionalBool(j, "use_qk_norm", true);
  }
  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    j["num_local_experts"] = c.num_experts;
    j["expert_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["use_qk_norm"] = c.qk_norm;
  }
  TensorNames HfTensorNames() const override {
    TensorNames n;
    n.router = "moe.router.weight";
    n.expert_gate = "moe.experts.{e}.gate.weight";
    n.expert_up = "moe.experts.{e}.up.weight";
    n.expert_down = "moe.experts.{e}.down.weight";
    return n;
  }

  bool GgufFeedForwardIsExpert() const override { return true; }
  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"attention.layer_norm_rms_epsilon", "expert_feed_forward_length",
            "expert_weights_norm"};
  }
  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    c.norm_topk_prob = f.GetBool("sample-moe.expert_weights_norm", false);
    c.qk_norm = c.qk_norm_per_head = f.FindTensorInfo("blk.0.attn_q_norm.weight") != nullptr;
  }
  void GgufTensorNames(gguf_map::ArchNames& n) const override {
    n.layer.push_back({"moe.router", "ffn_gate_inp"});
    n.expert_prefix = "moe.experts.";
    n.expert_mats = {"gate", "up", "down"};
  }

  ModelConfig PublishedConfig() const override {
    ModelConfig c = BaseConfig(arch());
    c.vocab_size = 32000;
    c.hidden_size = 2048;
    c.num_layers = 16;
    c.num_heads = 16;
    c.num_kv_heads = 4;
    c.head_dim = 128;
    c.num_experts = 32;
    c.num_experts_per_tok = 4;
    c.moe_intermediate_size = 1024;
    c.norm_topk_prob = false;
    c.qk_norm = c.qk_norm_per_head = true;
    c.eos_token_ids = {2};
    return c;
  }
};

const SampleFamily kSample;
const FamilyRegistration kRegisterSample(kSample);

TEST(ModelFamilyTable, NamesFindTheirFamily) {
  for (const Family* f : Families()) {
    const Family::Names& n = f->names();
    SCOPED_TRACE(n.model_type);
    EXPECT_EQ(&FamilyOf(n.arch), f);
    EXPECT_EQ(ParseArch(n.model_type), n.arch);
    for (std::string_view alias : n.aliases) EXPECT_EQ(ParseArch(std::string(alias)), n.arch);
    EXPECT_STREQ(ArchName(n.arch), n.model_type);
    ASSERT_NE(FindGgufFamily(n.gguf), nullptr);
    EXPECT_STREQ(FindGgufFamily(n.gguf)->names().gguf, n.gguf);
    EXPECT_STREQ(GgufArchName(n.arch), n.gguf);
  }
  EXPECT_EQ(ParseArch("sample"), kSampleArch);
  EXPECT_EQ(FindGgufFamily("no-such-arch"), nullptr);
}

TEST(ModelFamilyTable, ARegistrationThatReusesANameIsRefused) {
  SampleFamily again;
  try {
    FamilyRegistration twice(again);
    FAIL() << "a second sample_moe was registered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample_moe"), std::string::npos) << e.what();
  }
}

// Every family: its shapes are valid configs, and config.json round-trips through its
// reader and writer.
TEST(ModelFamilyConformance, ShapesValidateAndConfigJsonRoundTrips) {
  for (const Family* f : Families()) {
    for (ModelSize size : {ModelSize::kTiny, ModelSize::kSmall, ModelSize::kFull}) {
      SCOPED_TRACE(std::string(f->names().model_type) + " size " +
                   std::to_string(static_cast<int>(size)));
      const ModelConfig c = f->RandomConfig(size);
      EXPECT_EQ(c.arch, f->arch());
      EXPECT_NO_THROW(c.Validate());
      const nlohmann::json j = c.ToHfJson();
      EXPECT_EQ(j["model_type"], f->names().model_type);
      EXPECT_EQ(j["architectures"][0], f->names().hf_class);
      EXPECT_EQ(ModelConfig::FromHfJson(j).ToHfJson(), j);
    }
  }
}

double MaxError(const std::vector<float>& got, const std::vector<double>& want, double* scale) {
  double err = 0;
  *scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    *scale = std::max(*scale, std::abs(want[i]));
    err = std::max(err, std::abs(want[i] - static_cast<double>(got[i])));
  }
  return err;
}

std::vector<float> Logits(const Model& model, const std::vector<int32_t>& ids) {
  ResidentMoeExecutor executor(model);
  Transformer transformer(model, executor);
  KvCache cache(model.config, static_cast<int64_t>(ids.size()));
  BatchItem item{&cache, ids, true};
  return transformer.Forward({&item, 1});
}

TEST(SampleFamily, HfCheckpointMatchesTheReference) {
  auto model = LoadModel(testing::TinyModelPath(kSampleArch, DType::kF32));
  EXPECT_EQ(model->config.arch, kSampleArch);
  ASSERT_NE(model->weights->Find("model.layers.0.moe.experts.3.gate.weight"), nullptr);
  const std::vector<int32_t> ids = {1, 17, 300, 42, 42, 511, 0, 99};
  const std::vector<float> logits = Logits(*model, ids);
  const std::vector<double> ref = testing::ReferenceLogits(model->config, *model->weights, ids);
  ASSERT_EQ(logits.size(), ref.size());
  double scale = 0;
  const double err = MaxError(logits, ref, &scale);
  EXPECT_LT(err, 1e-4 * std::max(1.0, scale)) << "max |logit| " << scale;
}

TEST(SampleFamily, GgufKeepsTheConfigAndTheLogits) {
  testing::TempDir dir;
  RandomModelOptions o;
  o.config = RandomModelConfig(kSampleArch, ModelSize::kTiny);
  o.dtype = DType::kF32;
  o.seed = 7;
  o.format = "gguf";
  o.out = dir / "sample.gguf";
  WriteRandomModel(o);
  GgufFile file(o.out);
  EXPECT_EQ(file.GetString("general.architecture"), "sample-moe");
  EXPECT_FALSE(file.GetBool("sample-moe.expert_weights_norm", true));
  EXPECT_NE(file.FindTensorInfo("blk.0.ffn_gate_exps.weight"), nullptr);
  auto model = LoadModel(o.out);
  EXPECT_EQ(model->config.ToHfJson(), o.config.ToHfJson());
  const std::vector<int32_t> ids = {1, 17, 300, 42, 42};
  const std::vector<float> logits = Logits(*model, ids);
  const std::vector<double> ref = testing::ReferenceLogits(model->config, *model->weights, ids);
  double scale = 0;
  EXPECT_LT(MaxError(logits, ref, &scale), 1e-4 * std::max(1.0, scale));
}

}  // namespace
}  // namespace moex

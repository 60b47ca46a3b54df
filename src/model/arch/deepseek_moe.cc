// DeepSeek-MoE (v1, model_type "deepseek"): the first `first_k_dense_replace` layers are
// dense SwiGLU FFNs; MoE layers add `n_shared_experts` always-on experts, stored fused as
// one wide FFN. llama.cpp's converter permutes its Q/K rows (interleaved RoPE).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "model/arch/family.h"
#include "model/arch/hf_config_keys.h"
#include "model/gguf_arch_keys.h"
#include "model/random_model.h"

namespace moex {

namespace {

constexpr gguf_keys::ArchKeys kKeys{"deepseek"};

class DeepseekMoe : public Family {
 public:
  DeepseekMoe()
      : Family({Arch::kDeepseekMoe,
                "deepseek",
                "DeepseekForCausalLM",
                "deepseek",
                {"deepseek_moe", "deepseek-moe"}},
               {.counted_shared_experts = true}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    using namespace hf_keys;
    ReadDeepseekExperts(j, c);
    c.norm_topk_prob = OptionalBool(j, "norm_topk_prob", false);
    c.routed_scaling_factor = OptionalFloat(j, "routed_scaling_factor", 1.0f);
    c.shared_expert_intermediate_size = SharedExpertSize(j, 0, c.moe_intermediate_size);
    c.attention_bias = OptionalBool(j, "attention_bias", false);
    const std::string scoring = j.value("scoring_func", std::string("softmax"));
    Check(scoring == "softmax", "config.json: scoring_func '", scoring, "' is not supported");
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    hf_keys::WriteDeepseekExperts(c, j);
    j["scoring_func"] = "softmax";
    j["attention_bias"] = c.attention_bias;
  }

  TensorNames HfTensorNames() const override { return SharedExpertsNames(); }

  bool GgufPermutesQK() const override { return true; }
  std::optional<bool> LlamaCppFixedTopKNorm() const override { return false; }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"attention.layer_norm_rms_epsilon", "leading_dense_block_count",
            "expert_feed_forward_length", "expert_shared_count", "expert_weights_scale"};
  }

  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    // 0 means "not set" to llama.cpp.
    const double weights_scale = f.GetFloat(kKeys.Key("expert_weights_scale"), 0.0);
    c.routed_scaling_factor = weights_scale == 0.0 ? 1.0f : static_cast<float>(weights_scale);
    c.shared_expert_intermediate_size =
        kKeys.Uniform(f, "expert_shared_count", 0) * c.moe_intermediate_size;
    c.first_k_dense_replace = kKeys.Uniform(f, "leading_dense_block_count", 0);
  }

  void WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const override {
    kKeys.SetU32(w, "leading_dense_block_count", c.first_k_dense_replace);
    kKeys.SetU32(w, "expert_shared_count",
                 c.shared_expert_intermediate_size / c.moe_intermediate_size);
    kKeys.SetF32(w, "expert_weights_scale", c.routed_scaling_factor);
  }

  void GgufTensorNames(gguf_map::ArchNames& n) const override {
    MlpGateGgufNames(n, "mlp.shared_experts.");
  }

  ModelConfig PublishedConfig() const override {  // deepseek-moe-16b-base.
    ModelConfig c = BaseConfig(arch());
    c.vocab_size = 102400;
    c.hidden_size = 2048;
    c.num_layers = 28;
    c.num_heads = 16;
    c.num_kv_heads = 16;
    c.head_dim = 128;
    c.num_experts = 64;
    c.num_experts_per_tok = 6;
    c.moe_intermediate_size = 1408;
    c.shared_expert_intermediate_size = 2 * 1408;
    c.intermediate_size = 10944;
    c.first_k_dense_replace = 1;
    c.rope_theta = 10000;
    c.rms_norm_eps = 1e-6f;
    c.bos_token_id = 100000;
    c.eos_token_ids = {100001};
    return c;
  }
};

}  // namespace

TensorNames SharedExpertsNames() {
  TensorNames n;
  n.shared_gate = "mlp.shared_experts.gate_proj.weight";
  n.shared_up = "mlp.shared_experts.up_proj.weight";
  n.shared_down = "mlp.shared_experts.down_proj.weight";
  return n;
}

const Family& DeepseekMoeFamily() {
  static const DeepseekMoe family;
  return family;
}

}  // namespace moex

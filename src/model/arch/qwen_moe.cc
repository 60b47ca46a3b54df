// Qwen1.5/Qwen2-MoE (q/k/v biases, one shared expert scaled by a sigmoid gate) and
// Qwen3-MoE (per-head q/k RMSNorm, no shared expert). Both use the default HF names and
// llama.cpp's expert_feed_forward_length beside a dense feed_forward_length.
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

// The keys both generations spell the same way.
void ReadQwenExperts(const nlohmann::json& j, ModelConfig& c) {
  using namespace hf_keys;
  c.num_experts = RequireInt(j, "num_experts");
  c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
  c.moe_intermediate_size = RequireInt(j, "moe_intermediate_size");
  c.intermediate_size = OptionalInt(j, "intermediate_size", 0);
  c.norm_topk_prob = OptionalBool(j, "norm_topk_prob", false);
  // HF's Qwen2MoeDecoderLayer: sparse where (layer + 1) % decoder_sparse_step == 0.
  c.moe_layer_freq = OptionalInt(j, "decoder_sparse_step", 1);
  c.moe_layer_offset = c.moe_layer_freq > 1 ? 1 : 0;
  if (auto mlp_only = j.find("mlp_only_layers");
      mlp_only != j.end() && mlp_only->is_array() && !mlp_only->empty()) {
    Fail("config.json: mlp_only_layers is not supported yet");
  }
}

void WriteQwenExperts(const ModelConfig& c, nlohmann::json& j) {
  j["num_experts"] = c.num_experts;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["intermediate_size"] = c.intermediate_size;
  j["norm_topk_prob"] = c.norm_topk_prob;
  Check(c.moe_layer_freq == 1 || c.moe_layer_offset % c.moe_layer_freq == 1,
        "decoder_sparse_step cannot say MoE layers at (layer + ", c.moe_layer_offset, ") % ",
        c.moe_layer_freq, " == 0");
  j["decoder_sparse_step"] = c.moe_layer_freq;
  j["mlp_only_layers"] = nlohmann::json::array();
}

class Qwen2Moe : public Family {
 public:
  Qwen2Moe()
      : Family({Arch::kQwen2Moe,
                "qwen2_moe",
                "Qwen2MoeForCausalLM",
                "qwen2moe",
                {"qwen1.5_moe", "qwen2moe"}},
               {}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    ReadQwenExperts(j, c);
    c.attention_bias = true;  // Qwen2 attention always has q/k/v biases.
    c.shared_expert_intermediate_size =
        hf_keys::OptionalInt(j, "shared_expert_intermediate_size", 0);
    c.shared_expert_gate = c.shared_expert_intermediate_size > 0;
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    WriteQwenExperts(c, j);
    j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
  }

  std::optional<bool> LlamaCppFixedTopKNorm() const override { return false; }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"expert_feed_forward_length", "expert_shared_feed_forward_length",
            "attention.layer_norm_rms_epsilon"};
  }

  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    c.attention_bias = true;
    c.shared_expert_intermediate_size = kKeys.Uniform(f, "expert_shared_feed_forward_length", 0);
    if (c.shared_expert_intermediate_size == 0) {
      if (const GgufTensorInfo* t = f.FindTensorInfo("blk.0.ffn_gate_shexp.weight"))
        c.shared_expert_intermediate_size =
            gguf_keys::ToInt(f, t->name, t->ne.size() == 2 ? t->ne[1] : 0);
    }
    c.shared_expert_gate = c.shared_expert_intermediate_size > 0;
  }

  void WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const override {
    if (c.shared_expert_intermediate_size > 0)
      kKeys.SetU32(w, "expert_shared_feed_forward_length", c.shared_expert_intermediate_size);
  }

  void GgufTensorNames(gguf_map::ArchNames& n) const override {
    MlpGateGgufNames(n, "mlp.shared_expert.");
    n.layer.push_back({"mlp.shared_expert_gate", "ffn_gate_inp_shexp"});
  }

  ModelConfig PublishedConfig() const override {  // Qwen1.5-MoE-A2.7B.
    ModelConfig c = BaseConfig(arch());
    c.vocab_size = 151936;
    c.hidden_size = 2048;
    c.num_layers = 24;
    c.num_heads = 16;
    c.num_kv_heads = 16;
    c.head_dim = 128;
    c.num_experts = 60;
    c.num_experts_per_tok = 4;
    c.moe_intermediate_size = 1408;
    c.shared_expert_intermediate_size = 5632;
    c.shared_expert_gate = true;
    c.intermediate_size = 5632;
    c.attention_bias = true;
    c.rope_theta = 1e6f;
    c.rms_norm_eps = 1e-6f;
    c.eos_token_ids = {151643};
    c.max_position_embeddings = 8192;
    return c;
  }

 private:
  static constexpr gguf_keys::ArchKeys kKeys{"qwen2moe"};
};

class Qwen3Moe : public Family {
 public:
  Qwen3Moe()
      : Family({Arch::kQwen3Moe, "qwen3_moe", "Qwen3MoeForCausalLM", "qwen3moe", {"qwen3moe"}},
               {}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    ReadQwenExperts(j, c);
    c.attention_bias = hf_keys::OptionalBool(j, "attention_bias", false);
    c.qk_norm = true;
    c.qk_norm_per_head = true;
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    WriteQwenExperts(c, j);
    j["attention_bias"] = c.attention_bias;
  }

  TensorNames HfTensorNames() const override {
    TensorNames n;  // As Mixtral, llama.cpp's qwen3moe graph applies the experts' scales.
    n.expert_gate_scale = "mlp.experts.gate_proj.scale";
    n.expert_up_scale = "mlp.experts.up_proj.scale";
    n.expert_down_scale = "mlp.experts.down_proj.scale";
    return n;
  }

  std::optional<bool> LlamaCppFixedTopKNorm() const override { return true; }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"expert_feed_forward_length", "attention.layer_norm_rms_epsilon"};
  }

  void ReadGgufConfig(const GgufFile& /*f*/, ModelConfig& c) const override {
    c.qk_norm = true;
    c.qk_norm_per_head = true;
  }

  ModelConfig PublishedConfig() const override {  // Qwen3-30B-A3B.
    ModelConfig c = BaseConfig(arch());
    c.vocab_size = 151936;
    c.hidden_size = 2048;
    c.num_layers = 48;
    c.num_heads = 32;
    c.num_kv_heads = 4;
    c.head_dim = 128;
    c.num_experts = 128;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 768;
    c.intermediate_size = 6144;
    c.norm_topk_prob = true;
    c.qk_norm = true;
    c.qk_norm_per_head = true;
    c.rope_theta = 1e6f;
    c.rms_norm_eps = 1e-6f;
    c.eos_token_ids = {151645};
    c.max_position_embeddings = 40960;
    return c;
  }
};

}  // namespace

const Family& Qwen2MoeFamily() {
  static const Qwen2Moe family;
  return family;
}

const Family& Qwen3MoeFamily() {
  static const Qwen3Moe family;
  return family;
}

}  // namespace moex

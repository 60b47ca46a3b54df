// OLMoE: q/k RMSNorm over the whole projected vector (before the split into heads),
// top-8 of 64 without renormalisation. Default HF names.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/arch/family.h"
#include "model/arch/hf_config_keys.h"
#include "model/random_model.h"

namespace moex {

namespace {

class Olmoe : public Family {
 public:
  Olmoe() : Family({Arch::kOlmoe, "olmoe", "OlmoeForCausalLM", "olmoe", {}}, {}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    using namespace hf_keys;
    c.num_experts = RequireInt(j, "num_experts");
    c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
    c.moe_intermediate_size = RequireInt(j, "intermediate_size");
    c.norm_topk_prob = OptionalBool(j, "norm_topk_prob", false);
    c.attention_bias = OptionalBool(j, "attention_bias", false);
    c.qk_norm = true;
    c.qk_norm_per_head = false;
    if (auto clip = j.find("clip_qkv"); clip != j.end() && !clip->is_null())
      Fail("config.json: clip_qkv is not supported yet");
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    j["num_experts"] = c.num_experts;
    j["intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["attention_bias"] = c.attention_bias;
    j["clip_qkv"] = nullptr;
  }

  bool GgufFeedForwardIsExpert() const override { return true; }
  std::optional<bool> LlamaCppFixedTopKNorm() const override { return false; }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"attention.layer_norm_rms_epsilon"};
  }

  void ReadGgufConfig(const GgufFile& /*f*/, ModelConfig& c) const override {
    c.qk_norm = true;
    c.qk_norm_per_head = false;
  }

  ModelConfig PublishedConfig() const override {  // OLMoE-1B-7B-0924.
    ModelConfig c = BaseConfig(arch());
    c.vocab_size = 50304;
    c.hidden_size = 2048;
    c.num_layers = 16;
    c.num_heads = 16;
    c.num_kv_heads = 16;
    c.head_dim = 128;
    c.num_experts = 64;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 1024;
    c.rope_theta = 10000;
    c.qk_norm = true;
    c.eos_token_ids = {50279};
    return c;
  }
};

}  // namespace

const Family& OlmoeFamily() {
  static const Olmoe family;
  return family;
}

}  // namespace moex

// Mixtral (HF model_type "mixtral", llama.cpp "llama"): experts under block_sparse_moe,
// w1 = gate, w3 = up, w2 = down; top-2 with softmax over the top-k logits. llama.cpp's
// converter permutes Q/K rows for it (interleaved RoPE), and Llama 3's frequency factors
// come as one rope_freqs tensor (read as LongRoPE with one set of factors).
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "model/arch/family.h"
#include "model/arch/hf_config_keys.h"
#include "model/gguf_arch_keys.h"
#include "model/random_model.h"

namespace moex {

namespace {

class Mixtral : public Family {
 public:
  Mixtral() : Family({Arch::kMixtral, "mixtral", "MixtralForCausalLM", "llama", {}}, {}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    c.num_experts = hf_keys::RequireInt(j, "num_local_experts");
    c.num_experts_per_tok = hf_keys::RequireInt(j, "num_experts_per_tok");
    c.moe_intermediate_size = hf_keys::RequireInt(j, "intermediate_size");
    c.norm_topk_prob = true;  // Softmax over the top-k logits == renormalised top-k.
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    j["num_local_experts"] = c.num_experts;
    j["intermediate_size"] = c.moe_intermediate_size;
  }

  TensorNames HfTensorNames() const override {
    TensorNames n = BlockSparseMoeNames();
    // llama.cpp's llama graph applies the experts' scales (its phimoe graph does not).
    n.expert_gate_scale = "block_sparse_moe.experts.w1.scale";
    n.expert_up_scale = "block_sparse_moe.experts.w3.scale";
    n.expert_down_scale = "block_sparse_moe.experts.w2.scale";
    return n;
  }

  bool GgufFeedForwardIsExpert() const override { return true; }
  bool GgufPermutesQK() const override { return true; }
  std::optional<bool> LlamaCppFixedTopKNorm() const override { return true; }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"vocab_size", "attention.layer_norm_rms_epsilon"};
  }

  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    if (f.FindTensorInfo("rope_freqs.weight") == nullptr) return;
    // llama.cpp divides each RoPE frequency by these factors (Llama 3's scaling, stored as
    // a tensor): LongRoPE with one set of factors and no attention scaling.
    LongRope lr;
    lr.long_factor = gguf_keys::F32Vector(f, "rope_freqs.weight", c.head_dim / 2);
    for (const float x : lr.long_factor)
      Check(std::isfinite(x) && x != 0, f.path(), ": rope_freqs.weight holds ", x,
            " (a frequency factor must be finite and not 0)");
    lr.short_factor = lr.long_factor;
    lr.original_max_position_embeddings = c.max_position_embeddings;
    c.longrope = std::move(lr);
  }

  void GgufTensorNames(gguf_map::ArchNames& n) const override { BlockSparseMoeGgufNames(n); }

  ModelConfig PublishedConfig() const override {  // Mixtral-8x7B-v0.1.
    ModelConfig c = BaseConfig(arch());
    c.vocab_size = 32000;
    c.hidden_size = 4096;
    c.num_layers = 32;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 14336;
    c.rope_theta = 1e6f;
    c.norm_topk_prob = true;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    c.max_position_embeddings = 32768;
    return c;
  }
};

}  // namespace

TensorNames BlockSparseMoeNames() {
  TensorNames n;
  n.router = "block_sparse_moe.gate.weight";
  n.expert_gate = "block_sparse_moe.experts.{e}.w1.weight";
  n.expert_up = "block_sparse_moe.experts.{e}.w3.weight";
  n.expert_down = "block_sparse_moe.experts.{e}.w2.weight";
  return n;
}

void BlockSparseMoeGgufNames(gguf_map::ArchNames& n) {
  n.layer.push_back({"block_sparse_moe.gate", "ffn_gate_inp"});
  n.expert_prefix = "block_sparse_moe.experts.";
  n.expert_mats = {"w1", "w3", "w2"};
}

const Family& MixtralFamily() {
  static const Mixtral family;
  return family;
}

}  // namespace moex

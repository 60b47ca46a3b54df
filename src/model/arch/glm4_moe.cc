// GLM-4.5 / 4.5-Air / 4.6 / 4.7 (HF Glm4MoeConfig, whose defaults fill the keys a
// config.json leaves out; llama.cpp "glm4moe"): GQA with q/k/v biases (attention_bias) and
// optional per-head q/k RMSNorm (use_qk_norm), RoPE on the first head_dim *
// partial_rotary_factor values of each head, DeepSeek-V3's gate (sigmoid, correction bias,
// noaux_tc groups, always scaled), n_shared_experts shared experts and first_k_dense_replace
// dense layers. Tensors: Llama's attention names, DeepSeek-V3's MoE names (mlp.gate with
// its e_score_correction_bias, mlp.experts.N, fused mlp.shared_experts) and dense
// mlp.*_proj in the leading layers. HF's Glm4MoeMoE has no scoring_func/topk_method/
// moe_layer_freq keys: they are not read. The MTP layers (model.layers.{num_hidden_layers
// + i}) are never looked up.
#include <algorithm>
#include <cmath>

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

constexpr gguf_keys::ArchKeys kKeys{"glm4moe"};

class Glm4Moe : public Family {
 public:
  Glm4Moe()
      : Family({Arch::kGlm4Moe, "glm4_moe", "Glm4MoeForCausalLM", "glm4moe", {"glm4moe", "glm4.5"}},
               {.partial_rotary = true, .counted_shared_experts = true}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    using namespace hf_keys;
    c.num_experts = RequireInt(j, "n_routed_experts");
    c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
    c.moe_intermediate_size = RequireInt(j, "moe_intermediate_size");
    c.intermediate_size = RequireInt(j, "intermediate_size");
    c.first_k_dense_replace = OptionalInt(j, "first_k_dense_replace", 1);
    c.moe_layer_freq = 1;
    c.norm_topk_prob = OptionalBool(j, "norm_topk_prob", true);
    c.routed_scaling_factor = OptionalFloat(j, "routed_scaling_factor", 1.0f);
    c.scale_normalised_weights = true;
    c.shared_expert_intermediate_size = SharedExpertSize(j, 1, c.moe_intermediate_size);
    c.router = RouterKind::kGroupedTopK;
    c.scoring_func = ScoringFunc::kSigmoid;
    c.topk_method = TopKMethod::kNoauxTc;
    c.n_group = OptionalInt(j, "n_group", 1);
    c.topk_group = OptionalInt(j, "topk_group", 1);
    c.num_nextn_predict_layers = OptionalInt(j, "num_nextn_predict_layers", 0);
    c.attention_bias = OptionalBool(j, "attention_bias", false);
    c.attention_out_bias = false;  // o_proj never has a bias in Glm4MoeAttention.
    c.qk_norm = OptionalBool(j, "use_qk_norm", false);
    c.qk_norm_per_head = c.qk_norm;
    c.max_position_embeddings = OptionalInt(j, "max_position_embeddings", 131072);
    CheckSilu(j, "glm4_moe");
    double factor = OptionalDouble(j, "partial_rotary_factor", 0.5);
    // transformers 5 also writes rope_parameters {rope_type, rope_theta,
    // partial_rotary_factor}; a value given in both places must agree.
    if (auto rp = j.find("rope_parameters"); rp != j.end() && !rp->is_null()) {
      Check(rp->is_object(), "config.json: rope_parameters must be an object or null");
      const std::string type = rp->value("rope_type", std::string("default"));
      Check(type == "default", "config.json: rope_parameters.rope_type '", type,
            "' is not supported for glm4_moe (default only)");
      if (auto f = rp->find("partial_rotary_factor"); f != rp->end()) {
        Check(f->is_number(),
              "config.json: rope_parameters.partial_rotary_factor must be a number");
        Check(!j.contains("partial_rotary_factor") || f->get<double>() == factor,
              "config.json: partial_rotary_factor is ", factor, " but rope_parameters says ",
              f->get<double>());
        factor = f->get<double>();
      }
      if (auto t = rp->find("rope_theta"); t != rp->end()) {
        Check(t->is_number(), "config.json: rope_parameters.rope_theta must be a number");
        Check(!j.contains("rope_theta") || t->get<float>() == c.rope_theta,
              "config.json: rope_theta is ", c.rope_theta, " but rope_parameters says ",
              t->get<float>());
        c.rope_theta = t->get<float>();
      }
    }
    Check(std::isfinite(factor) && factor > 0 && factor <= 1,
          "config.json: partial_rotary_factor must be in (0, 1], got ", factor);
    // HF: dim = int(head_dim * partial_rotary_factor).
    c.rope_dim = static_cast<int>(static_cast<double>(c.head_dim) * factor);
    Check(c.rope_dim >= 2, "config.json: head_dim * partial_rotary_factor (", c.head_dim, " * ",
          factor, ") leaves fewer than 2 rotary dimensions");
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    hf_keys::WriteDeepseekExperts(c, j);
    j.erase("moe_layer_freq");  // Not a Glm4MoeConfig key: every layer past the dense ones.
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["attention_bias"] = c.attention_bias;
    j["use_qk_norm"] = c.qk_norm;
    j["partial_rotary_factor"] = static_cast<double>(c.RotaryDim()) / c.head_dim;
    j["hidden_act"] = "silu";
    j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
    j["rope_scaling"] = nullptr;
  }

  TensorNames HfTensorNames() const override { return SharedExpertsNames(); }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"expert_feed_forward_length", "attention.layer_norm_rms_epsilon",
            "rope.dimension_sections",    "expert_shared_count",
            "leading_dense_block_count",  "expert_weights_scale",
            "expert_weights_norm",        "expert_gating_func"};
  }

  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    const int nextn = kKeys.Int(f, "nextn_predict_layers", 0);
    Check(nextn < c.num_layers, f.path(), ": ", kKeys.Key("nextn_predict_layers"), " (", nextn,
          ") leaves no layers of block_count ", c.num_layers);
    c.num_layers -= nextn;  // llama.cpp runs block_count - nextn_predict_layers blocks.
    c.num_nextn_predict_layers = nextn;
    c.rope_dim = kKeys.Int(f, "rope.dimension_count", c.head_dim);
    c.intermediate_size = kKeys.Int(f, "feed_forward_length", 0);
    c.first_k_dense_replace = kKeys.Int(f, "leading_dense_block_count", 0);
    c.shared_expert_intermediate_size =
        kKeys.Int(f, "expert_shared_count", 0) * c.moe_intermediate_size;
    const int gating = kKeys.Int(f, "expert_gating_func", 2);
    Check(gating == 2, f.path(), ": ", kKeys.Key("expert_gating_func"), " ", gating,
          " is not supported for glm4moe (2, sigmoid)");
    c.router = RouterKind::kGroupedTopK;
    c.scoring_func = ScoringFunc::kSigmoid;
    c.topk_method = TopKMethod::kNoauxTc;
    c.scale_normalised_weights = true;
    // llama.cpp scales the routing weights unless the scale is 0 (its default) or 1.
    const double scale = f.GetFloat(kKeys.Key("expert_weights_scale"), 1.0);
    c.routed_scaling_factor = scale == 0.0 ? 1.0f : static_cast<float>(scale);
    // 0 (llama.cpp's default) is one group.
    c.n_group = std::max(1, kKeys.Int(f, "expert_group_count", 1));
    c.topk_group = std::max(1, kKeys.Int(f, "expert_group_used_count", c.n_group));
    c.norm_topk_prob = f.GetBool(kKeys.Key("expert_weights_norm"), false);
    // llama.cpp computes M-RoPE when these are set, but it gives a text token the same
    // position in every section, which makes M-RoPE the NeoX RoPE moex computes.
    f.Find(kKeys.Key("rope.dimension_sections"));
    c.qk_norm = f.FindTensorInfo("blk.0.attn_q_norm.weight") != nullptr;
    c.qk_norm_per_head = c.qk_norm;
  }

  void WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const override {
    auto u32 = [&](const char* key, int v) { kKeys.SetU32(w, key, static_cast<uint32_t>(v)); };
    u32("block_count", c.num_layers);  // MTP layers are not written.
    u32("rope.dimension_count", c.RotaryDim());
    u32("leading_dense_block_count", c.first_k_dense_replace);
    u32("expert_shared_count", c.shared_expert_intermediate_size / c.moe_intermediate_size);
    kKeys.SetF32(w, "expert_weights_scale", c.routed_scaling_factor);
    u32("expert_gating_func", 2);
    if (c.n_group > 1) {
      u32("expert_group_count", c.n_group);
      u32("expert_group_used_count", c.topk_group);
    }
  }

  void GgufTensorNames(gguf_map::ArchNames& n) const override {
    for (gguf_map::NamePair& p : n.layer)  // llama.cpp names GLM's FFN input norm so.
      if (p.hf == "post_attention_layernorm") p.gguf = "post_attention_norm";
    MlpGateGgufNames(n, "mlp.shared_experts.");
  }

  // GLM-4.5-Air (its config.json; GLM-4.5 adds qk norm and a 2.5 scale).
  ModelConfig PublishedConfig() const override {
    ModelConfig c = BaseConfig(arch());
    c.vocab_size = 151552;
    c.hidden_size = 4096;
    c.num_layers = 46;
    c.num_heads = 96;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.rope_dim = 64;
    c.num_experts = 128;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 1408;
    c.shared_expert_intermediate_size = 1408;
    c.intermediate_size = 10944;
    c.first_k_dense_replace = 1;
    c.attention_bias = true;
    c.rope_theta = 1e6f;
    c.rms_norm_eps = 1e-5f;
    c.router = RouterKind::kGroupedTopK;
    c.scoring_func = ScoringFunc::kSigmoid;
    c.topk_method = TopKMethod::kNoauxTc;
    c.norm_topk_prob = true;
    c.routed_scaling_factor = 1.0f;
    c.max_position_embeddings = 131072;
    c.num_nextn_predict_layers = 1;
    c.eos_token_ids = {151329, 151336, 151338};
    return c;
  }
};

}  // namespace

const Family& Glm4MoeFamily() {
  static const Glm4Moe family;
  return family;
}

}  // namespace moex

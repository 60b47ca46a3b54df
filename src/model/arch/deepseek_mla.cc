// DeepSeek-V2 / V2-Lite / V3 (HF DeepseekV2Config / DeepseekV3Config, whose defaults fill
// the keys a config.json leaves out; llama.cpp "deepseek2" for both): MLA attention
// (TensorNames' q_a/q_b/kv_a/kv_b names, plain q_proj when q_lora_rank is null), the grouped
// gate, DeepSeek-MoE's fused shared experts and dense leading layers, V3's gate correction
// bias (mlp.gate.e_score_correction_bias) and YaRN. V3's multi-token-prediction layers
// (model.layers.{num_hidden_layers + i}) are read from the config and never looked up.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "model/arch/family.h"
#include "model/arch/hf_config_keys.h"
#include "model/gguf_arch_keys.h"
#include "model/gguf_deepseek2.h"
#include "model/random_model.h"

namespace moex {

namespace {

// Full: the published DeepSeek-V2-Lite / DeepSeek-V3 config; small and tiny keep the
// topology (MLA with or without q_lora, shared experts, one leading dense layer, the
// gate's groups) and shrink widths and depth.
ModelConfig MlaConfig(Arch arch, ModelSize size) {
  ModelConfig c;
  c.arch = arch;
  c.router = RouterKind::kGroupedTopK;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 10000.0f;
  c.max_position_embeddings = 163840;
  Mla m;
  m.kv_lora_rank = 512;
  m.qk_nope_head_dim = 128;
  m.qk_rope_head_dim = 64;
  m.v_head_dim = 128;
  Yarn y;
  y.factor = 40.0f;
  y.original_max_position_embeddings = 4096;
  y.beta_fast = 32.0f;
  y.beta_slow = 1.0f;
  if (arch == Arch::kDeepseekV2) {  // DeepSeek-V2-Lite.
    c.vocab_size = 102400;
    c.hidden_size = 2048;
    c.num_layers = 27;
    c.num_heads = 16;
    c.num_experts = 64;
    c.num_experts_per_tok = 6;
    c.moe_intermediate_size = 1408;
    c.intermediate_size = 10944;
    c.shared_expert_intermediate_size = 2 * 1408;
    c.first_k_dense_replace = 1;
    c.scoring_func = ScoringFunc::kSoftmax;
    c.topk_method = TopKMethod::kGreedy;
    c.norm_topk_prob = false;
    c.routed_scaling_factor = 1.0f;
    c.scale_normalised_weights = false;
    c.bos_token_id = 100000;
    c.eos_token_ids = {100001};
    m.q_lora_rank = 0;
    y.mscale = 0.707f;
    y.mscale_all_dim = 0.707f;
  } else {  // DeepSeek-V3.
    c.vocab_size = 129280;
    c.hidden_size = 7168;
    c.num_layers = 61;
    c.num_heads = 128;
    c.num_experts = 256;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 2048;
    c.intermediate_size = 18432;
    c.shared_expert_intermediate_size = 2048;
    c.first_k_dense_replace = 3;
    c.scoring_func = ScoringFunc::kSigmoid;
    c.topk_method = TopKMethod::kNoauxTc;
    c.n_group = 8;
    c.topk_group = 4;
    c.norm_topk_prob = true;
    c.routed_scaling_factor = 2.5f;
    c.scale_normalised_weights = true;
    c.bos_token_id = 0;
    c.eos_token_ids = {1};
    c.num_nextn_predict_layers = 1;
    m.q_lora_rank = 1536;
    y.mscale = 1.0f;
    y.mscale_all_dim = 1.0f;
  }
  if (size == ModelSize::kSmall) {
    c.hidden_size = 1024;
    c.num_heads = 16;
    c.num_layers = 8;
    const int f = std::max(c.moe_intermediate_size / 4, 64);
    c.shared_expert_intermediate_size =
        c.shared_expert_intermediate_size / c.moe_intermediate_size * f;
    c.moe_intermediate_size = f;
    c.intermediate_size = 4 * f;
    c.first_k_dense_replace = 1;
    c.num_experts = std::min(c.num_experts, 64);
    if (c.n_group > 1) c.n_group = 4, c.topk_group = 2;
    m.kv_lora_rank = 256;
    m.qk_nope_head_dim = 64;
    m.qk_rope_head_dim = 32;
    m.v_head_dim = 64;
    if (m.q_lora_rank > 0) m.q_lora_rank = 384;
    y.original_max_position_embeddings = 512;
    c.num_nextn_predict_layers = 0;
  } else if (size == ModelSize::kTiny) {
    // Fast enough for the double-precision reference; YaRN's original length is small so
    // its interpolated band covers rotations the tests reach.
    c.vocab_size = 512;
    c.hidden_size = 64;
    c.num_heads = 4;
    c.num_layers = 3;
    c.num_experts = 16;
    c.moe_intermediate_size = 32;
    c.intermediate_size = 128;
    c.shared_expert_intermediate_size = c.shared_expert_intermediate_size > 2048 ? 64 : 32;
    c.first_k_dense_replace = 1;
    c.max_position_embeddings = 512;
    c.eos_token_ids = {2};
    c.bos_token_id = 1;
    c.num_nextn_predict_layers = 0;
    m.kv_lora_rank = 32;
    m.qk_nope_head_dim = 16;
    m.qk_rope_head_dim = 8;
    m.v_head_dim = 12;
    if (m.q_lora_rank > 0) m.q_lora_rank = 24;
    if (arch == Arch::kDeepseekV3) {
      c.num_experts_per_tok = 4;
      c.n_group = 4;
      c.topk_group = 2;
      // Not V3's mscale = mscale_all_dim: this exercises both of YaRN's magnitude terms.
      y.mscale_all_dim = 0.8f;
    } else {
      c.num_experts_per_tok = 4;
    }
    y.factor = 4.0f;
    y.original_max_position_embeddings = 32;
  }
  c.mla = m;
  c.yarn = y;
  c.head_dim = m.qk_rope_head_dim;
  c.num_kv_heads = c.num_heads;
  return c;
}

class DeepseekMla : public Family {
 public:
  explicit DeepseekMla(Names names)
      : Family(std::move(names), {.deepseek_yarn = true, .counted_shared_experts = true}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    using namespace hf_keys;
    const bool v3 = c.arch == Arch::kDeepseekV3;
    ReadDeepseekExperts(j, c);
    c.norm_topk_prob = OptionalBool(j, "norm_topk_prob", v3);
    c.routed_scaling_factor = OptionalFloat(j, "routed_scaling_factor", v3 ? 2.5f : 1.0f);
    c.scale_normalised_weights = v3;
    c.shared_expert_intermediate_size = SharedExpertSize(j, 0, c.moe_intermediate_size);
    Check(!OptionalBool(j, "attention_bias", false),
          "config.json: attention_bias = true is not supported for ", ArchName(c.arch));
    CheckSilu(j, ArchName(c.arch));
    c.rms_norm_eps = OptionalFloat(j, "rms_norm_eps", 1e-6f);

    c.router = RouterKind::kGroupedTopK;
    const std::string scoring = j.value("scoring_func", std::string(v3 ? "sigmoid" : "softmax"));
    Check(scoring == "softmax" || scoring == "sigmoid", "config.json: scoring_func '", scoring,
          "' is not supported (softmax or sigmoid)");
    c.scoring_func = scoring == "sigmoid" ? ScoringFunc::kSigmoid : ScoringFunc::kSoftmax;
    const std::string method = j.value("topk_method", std::string(v3 ? "noaux_tc" : "greedy"));
    if (method == "greedy") {
      c.topk_method = TopKMethod::kGreedy;
    } else if (method == "group_limited_greedy") {
      c.topk_method = TopKMethod::kGroupLimitedGreedy;
    } else if (method == "noaux_tc") {
      c.topk_method = TopKMethod::kNoauxTc;
    } else {
      Fail("config.json: topk_method '", method,
           "' is not supported (greedy, group_limited_greedy or noaux_tc)");
    }
    c.n_group = OptionalInt(j, "n_group", v3 ? 8 : 1);
    c.topk_group = OptionalInt(j, "topk_group", v3 ? 4 : 1);
    if (c.topk_method == TopKMethod::kGreedy) c.n_group = c.topk_group = 1;  // Not read by HF.
    c.num_nextn_predict_layers = OptionalInt(j, "num_nextn_predict_layers", 0);

    Mla m;
    auto q_lora = j.find("q_lora_rank");
    m.q_lora_rank =
        q_lora == j.end() || q_lora->is_null() ? (v3 ? 1536 : 0) : RequireInt(j, "q_lora_rank");
    m.kv_lora_rank = OptionalInt(j, "kv_lora_rank", 512);
    m.qk_nope_head_dim = OptionalInt(j, "qk_nope_head_dim", 128);
    m.qk_rope_head_dim = OptionalInt(j, "qk_rope_head_dim", 64);
    m.v_head_dim = OptionalInt(j, "v_head_dim", 128);
    c.mla = m;
    // The engine's RoPE tables are sized by head_dim: for MLA that is the rotated part.
    c.head_dim = m.qk_rope_head_dim;
    c.num_kv_heads = c.num_heads;
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    hf_keys::WriteDeepseekExperts(c, j);
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["scoring_func"] = c.scoring_func == ScoringFunc::kSigmoid ? "sigmoid" : "softmax";
    j["topk_method"] = c.topk_method == TopKMethod::kGreedy               ? "greedy"
                       : c.topk_method == TopKMethod::kGroupLimitedGreedy ? "group_limited_greedy"
                                                                          : "noaux_tc";
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["attention_bias"] = false;
    j["hidden_act"] = "silu";
    if (c.arch == Arch::kDeepseekV3) j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
    if (c.mla) {
      j["q_lora_rank"] = c.mla->q_lora_rank > 0 ? nlohmann::json(c.mla->q_lora_rank) : nullptr;
      j["kv_lora_rank"] = c.mla->kv_lora_rank;
      j["qk_nope_head_dim"] = c.mla->qk_nope_head_dim;
      j["qk_rope_head_dim"] = c.mla->qk_rope_head_dim;
      j["v_head_dim"] = c.mla->v_head_dim;
    }
    j.erase("head_dim");  // DeepSeek's configs have none (head_dim is qk_rope_head_dim).
    j["rope_scaling"] = hf_keys::YarnJson(c.yarn, /*generic=*/false);
  }

  TensorNames HfTensorNames() const override {
    TensorNames n = SharedExpertsNames();
    // llama.cpp's MLA graph multiplies attn_q without its .scale (only attn_output's is used).
    n.q_scale.clear();
    return n;
  }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"vocab_size",
            "attention.layer_norm_rms_epsilon",
            "leading_dense_block_count",
            "attention.q_lora_rank",
            "attention.kv_lora_rank",
            "attention.key_length_mla",
            "attention.value_length_mla",
            "expert_feed_forward_length",
            "expert_shared_count",
            "expert_weights_scale",
            "expert_weights_norm",
            "expert_gating_func",
            "rope.scaling.yarn_log_multiplier",
            "attention.temperature_scale",
            "attention.temperature_length"};
  }

  // deepseek2 files: V2 until gguf_deepseek2::ReadConfig tells V2 from V3.
  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    // 0 means "not set" to llama.cpp.
    const double weights_scale = f.GetFloat(kKeys.Key("expert_weights_scale"), 0.0);
    c.routed_scaling_factor = weights_scale == 0.0 ? 1.0f : static_cast<float>(weights_scale);
    gguf_deepseek2::ReadConfig(f, c);
  }

  void WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const override {
    gguf_deepseek2::WriteConfig(c, w);
  }

  // llama.cpp's deepseek2 names; kv_b_proj's split form is gguf_deepseek2's.
  void GgufTensorNames(gguf_map::ArchNames& n) const override {
    MlpGateGgufNames(n, nullptr);
    n.layer.push_back({"self_attn.q_a_proj", "attn_q_a"});
    n.layer.push_back({"self_attn.q_a_layernorm", "attn_q_a_norm"});
    n.layer.push_back({"self_attn.q_b_proj", "attn_q_b"});
    n.layer.push_back({"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"});
    n.layer.push_back({"self_attn.kv_a_layernorm", "attn_kv_a_norm"});
    n.layer.push_back({"self_attn.kv_b_proj", "attn_kv_b"});  // Older files: unsplit.
    SharedExpertsGgufNames(n, "mlp.shared_experts.");
  }

  ModelConfig PublishedConfig() const override { return MlaConfig(arch(), ModelSize::kFull); }
  ModelConfig RandomConfig(ModelSize size) const override { return MlaConfig(arch(), size); }

  void Validate(const ModelConfig& c) const override {
    Check(c.mla.has_value(), "config: ", ArchName(c.arch),
          " needs the MLA sizes (kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)");
  }

 private:
  static constexpr gguf_keys::ArchKeys kKeys{"deepseek2"};
};

}  // namespace

const Family& DeepseekV2Family() {
  static const DeepseekMla family({Arch::kDeepseekV2,
                                   "deepseek_v2",
                                   "DeepseekV2ForCausalLM",
                                   "deepseek2",
                                   {"deepseek-v2", "deepseek2"}});
  return family;
}

const Family& DeepseekV3Family() {
  static const DeepseekMla family({Arch::kDeepseekV3,
                                   "deepseek_v3",
                                   "DeepseekV3ForCausalLM",
                                   "deepseek2",
                                   {"deepseek-v3", "deepseek3"}});
  return family;
}

}  // namespace moex

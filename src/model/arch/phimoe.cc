// Phi-3.5-MoE (HF PhimoeConfig, llama.cpp "phimoe"): Mixtral's expert names, LayerNorm with
// bias, sparsemixer routing, biases on every attention projection (o_proj too) and on
// lm_head, LongRoPE. Defaults are PhimoeConfig's, for keys a config.json leaves out.
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

constexpr gguf_keys::ArchKeys kKeys{"phimoe"};

class PhiMoe : public Family {
 public:
  PhiMoe()
      : Family({Arch::kPhiMoe, "phimoe", "PhiMoEForCausalLM", "phimoe", {"phi3.5_moe", "phi-moe"}},
               {.longrope = true}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    using namespace hf_keys;
    c.num_experts = RequireInt(j, "num_local_experts");
    c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
    c.moe_intermediate_size = RequireInt(j, "intermediate_size");
    c.norm = NormKind::kLayerNorm;
    c.router = RouterKind::kSparseMixer;
    c.norm_topk_prob = false;  // Sparsemixer's weights are used as they are.
    c.router_jitter_noise = OptionalDouble(j, "router_jitter_noise", 0.01);
    Check(std::isfinite(c.router_jitter_noise) && c.router_jitter_noise >= 0,
          "config.json: router_jitter_noise must be a finite number >= 0, got ",
          c.router_jitter_noise);
    OptionalDouble(j, "input_jitter_noise", 0.0);  // Training only: checked, then unused.
    c.attention_bias = OptionalBool(j, "attention_bias", false);
    c.attention_out_bias = c.attention_bias;  // One flag covers q, k, v and o in HF.
    c.lm_head_bias = OptionalBool(j, "lm_head_bias", false);
    c.rope_theta = OptionalFloat(j, "rope_theta", 1e6f);
    c.max_position_embeddings = OptionalInt(j, "max_position_embeddings", 4096 * 32);
    c.sliding_window = OptionalInt(j, "sliding_window", 0);
    Check(c.sliding_window >= 0, "config.json: sliding_window must be >= 0");
    CheckSilu(j, "phimoe");
    // PhimoeAttention always uses hidden_size / num_attention_heads.
    if (c.num_heads > 0) {
      Check(c.head_dim * c.num_heads == c.hidden_size, "config.json: phimoe needs head_dim (",
            c.head_dim, ") = hidden_size / num_attention_heads (", c.hidden_size, " / ",
            c.num_heads, ")");
    }
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    j["num_local_experts"] = c.num_experts;
    j["intermediate_size"] = c.moe_intermediate_size;
    j["attention_bias"] = c.attention_bias;
    j["lm_head_bias"] = c.lm_head_bias;
    j["hidden_act"] = "silu";
    j["router_jitter_noise"] = c.router_jitter_noise;
    j["input_jitter_noise"] = 0.0;
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
    j["rope_scaling"] = nullptr;
    if (c.longrope) {
      j["original_max_position_embeddings"] = c.longrope->original_max_position_embeddings;
      j["rope_scaling"] = {
          {"type", "longrope"},
          {"short_factor", c.longrope->short_factor},
          {"long_factor", c.longrope->long_factor},
          {"short_mscale", c.longrope->short_mscale},
          {"long_mscale", c.longrope->long_mscale},
          {"original_max_position_embeddings", c.longrope->original_max_position_embeddings}};
    }
  }

  TensorNames HfTensorNames() const override { return BlockSparseMoeNames(); }

  bool GgufFeedForwardIsExpert() const override { return true; }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"attention.layer_norm_rms_epsilon"};
  }

  // LayerNorm and sparsemixer are implied by the architecture. llama.cpp has no key for
  // the router jitter (it routes phimoe by softmax top-2) nor for HF's short/long mscale;
  // moex writes its own keys for both and otherwise uses PhimoeConfig's jitter default and
  // llama.cpp's attn_factor (HF's LongRoPE factor when mscales are absent).
  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    c.norm = NormKind::kLayerNorm;
    c.router = RouterKind::kSparseMixer;
    c.norm_topk_prob = false;
    c.router_jitter_noise = f.GetFloat(kKeys.Key("router_jitter_noise"), 0.01);
    c.sliding_window = kKeys.Int(f, "attention.sliding_window", 0);
    const bool has_long = f.FindTensorInfo("rope_factors_long.weight") != nullptr;
    const bool has_short = f.FindTensorInfo("rope_factors_short.weight") != nullptr;
    if (!has_long && !has_short) return;
    Check(has_long && has_short, f.path(),
          ": LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight");
    LongRope lr;
    const int64_t half = c.head_dim / 2;
    lr.long_factor = gguf_keys::F32Vector(f, "rope_factors_long.weight", half);
    lr.short_factor = gguf_keys::F32Vector(f, "rope_factors_short.weight", half);
    const std::string original = kKeys.Key("rope.scaling.original_context_length");
    lr.original_max_position_embeddings = gguf_keys::ToInt(f, original, f.GetInt(original));
    const double attn = f.GetFloat(
        kKeys.Key("rope.scaling.attn_factor"),
        LongRopeAttentionFactor(c.max_position_embeddings, lr.original_max_position_embeddings));
    lr.short_mscale = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.short_mscale"), attn));
    lr.long_mscale = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.long_mscale"), attn));
    c.longrope = std::move(lr);
  }

  // llama.cpp's Phi-3 keys, plus moex's own for what llama.cpp does not carry.
  void WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const override {
    w.Set(kKeys.Key("router_jitter_noise"), GgufValue::F64(c.router_jitter_noise));
    if (c.sliding_window > 0) kKeys.SetU32(w, "attention.sliding_window", c.sliding_window);
    if (!c.longrope) return;
    const LongRope& lr = *c.longrope;
    kKeys.SetU32(w, "rope.scaling.original_context_length", lr.original_max_position_embeddings);
    kKeys.SetF32(w, "rope.scaling.attn_factor",
                 static_cast<float>(LongRopeAttentionFactor(c.max_position_embeddings,
                                                            lr.original_max_position_embeddings)));
    kKeys.SetF32(w, "rope.scaling.short_mscale", lr.short_mscale);
    kKeys.SetF32(w, "rope.scaling.long_mscale", lr.long_mscale);
  }

  void GgufTensorNames(gguf_map::ArchNames& n) const override { BlockSparseMoeGgufNames(n); }

  // Phi-3.5-MoE-instruct (its LongRoPE factors are not reproduced: RandomConfig adds
  // MakeLongRope's).
  ModelConfig PublishedConfig() const override {
    ModelConfig c = BaseConfig(arch());
    c.vocab_size = 32064;
    c.hidden_size = 4096;
    c.num_layers = 32;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.num_experts = 16;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 6400;
    c.rope_theta = 10000;
    c.rms_norm_eps = 1e-5f;
    c.norm = NormKind::kLayerNorm;
    c.router = RouterKind::kSparseMixer;
    c.router_jitter_noise = 0.01;
    c.attention_bias = true;
    c.attention_out_bias = true;
    c.lm_head_bias = true;
    c.max_position_embeddings = 131072;
    c.bos_token_id = 1;
    c.eos_token_ids = {32000};
    return c;
  }
};

}  // namespace

const Family& PhiMoeFamily() {
  static const PhiMoe family;
  return family;
}

}  // namespace moex

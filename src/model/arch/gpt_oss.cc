// gpt-oss (HF GptOssConfig, whose defaults fill the keys a config.json leaves out;
// llama.cpp "gpt-oss"): GQA with biases on q/k/v/o, a learned sink logit per head
// (self_attn.sinks), sliding-window layers (layer_types, default alternating from sliding),
// the router under mlp.router with a bias, experts with biases and the clamped SwiGLU
// (swiglu_limit), softmax over the top-k router logits, HF's generic YaRN. The routed
// experts are read per expert under the default names (mlp.experts.{e}.gate_proj etc.) and
// their biases per layer: an HF checkpoint stores them fused and gate/up interleaved, and
// model/gpt_oss_weights.h presents them in this form; a GGUF stores them this way already.
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "model/arch/family.h"
#include "model/arch/hf_config_keys.h"
#include "model/gguf_arch_keys.h"
#include "model/gguf_gpt_oss.h"
#include "model/gguf_llamacpp_keys.h"
#include "model/random_model.h"

namespace moex {

namespace {

// llama.cpp's graph constant for gpt-oss's activation limit.
constexpr float kLlamaCppSwigluLimit = 7.0f;

constexpr gguf_keys::ArchKeys kKeys{gguf_gpt_oss::kArch};

// Full: the published gpt-oss-20b config; small and tiny keep the topology (GQA 8:1 or 2:1,
// alternating sliding/full layers from sliding, sinks, biases everywhere, YaRN without
// truncation) and shrink widths and depth. Tiny uses a window of 4 positions and
// swiglu_limit 1 so that short test sequences cross the window and the activation's clamps.
ModelConfig GptOssConfig(ModelSize size) {
  ModelConfig c;
  c.arch = Arch::kGptOss;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 150000.0f;
  c.norm_topk_prob = true;
  c.router_bias = true;
  c.attention_bias = true;
  c.attention_out_bias = true;
  c.attention_sinks = true;
  c.swiglu_limit = 7.0f;
  c.sliding_window = 128;
  Yarn y;
  y.factor = 32.0f;
  y.original_max_position_embeddings = 4096;
  y.beta_fast = 32.0f;
  y.beta_slow = 1.0f;
  y.truncate = false;
  // gpt-oss-20b.
  c.vocab_size = 201088;
  c.hidden_size = 2880;
  c.num_layers = 24;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.num_experts = 32;
  c.num_experts_per_tok = 4;
  c.moe_intermediate_size = 2880;
  c.eos_token_ids = {200002};
  if (size == ModelSize::kSmall) {
    c.hidden_size = 1024;
    c.num_layers = 8;
    c.num_heads = 16;
    c.num_kv_heads = 2;
    c.moe_intermediate_size = 768;
    y.original_max_position_embeddings = 512;
  } else if (size == ModelSize::kTiny) {
    c.vocab_size = 512;
    c.hidden_size = 64;
    c.num_layers = 3;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    c.num_experts = 8;
    c.moe_intermediate_size = 32;
    c.sliding_window = 4;
    c.swiglu_limit = 1.0f;
    c.eos_token_ids = {2};
    y.factor = 4.0f;
    y.original_max_position_embeddings = 32;
  }
  // HF derives YaRN's factor from these two as well; they agree by construction.
  c.max_position_embeddings = static_cast<int>(y.factor) * y.original_max_position_embeddings;
  c.yarn = y;
  c.layer_sliding = AlternatingSlidingLayers(c.num_layers);
  return c;
}

class GptOss : public Family {
 public:
  GptOss()
      : Family({Arch::kGptOss,
                "gpt_oss",
                "GptOssForCausalLM",
                gguf_gpt_oss::kArch,
                {"gpt-oss", "gptoss"}},
               {.generic_yarn = true, .gpt_oss_blocks = true}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    using namespace hf_keys;
    c.num_experts = RequireInt(j, "num_local_experts");
    c.num_experts_per_tok = OptionalInt(j, "num_experts_per_tok", 4);
    c.moe_intermediate_size = RequireInt(j, "intermediate_size");
    c.norm_topk_prob = true;  // Softmax over the top-k logits == renormalised top-k softmax.
    c.router_bias = true;
    c.attention_bias = OptionalBool(j, "attention_bias", true);
    c.attention_out_bias = c.attention_bias;  // One flag covers q, k, v and o in HF.
    c.attention_sinks = true;
    c.rope_theta = OptionalFloat(j, "rope_theta", 150000.0f);
    c.max_position_embeddings = OptionalInt(j, "max_position_embeddings", 131072);
    c.sliding_window = OptionalInt(j, "sliding_window", 128);
    Check(c.sliding_window > 0, "config.json: gpt_oss sliding_window must be > 0, got ",
          c.sliding_window);
    c.swiglu_limit = OptionalFloat(j, "swiglu_limit", 7.0f);
    Check(std::isfinite(c.swiglu_limit) && c.swiglu_limit > 0,
          "config.json: swiglu_limit must be a finite number > 0, got ", c.swiglu_limit);
    c.head_dim = OptionalInt(j, "head_dim", 64);
    CheckSilu(j, "gpt_oss");
    OptionalDouble(j, "router_aux_loss_coef", 0.9);  // Training only: checked, then unused.
    c.layer_sliding.clear();
    auto types = j.find("layer_types");
    if (types == j.end() || types->is_null()) {
      c.layer_sliding = AlternatingSlidingLayers(c.num_layers);
      return;
    }
    Check(types->is_array(), "config.json: layer_types must be a list");
    for (const auto& t : *types) {
      Check(t.is_string() && (t == "sliding_attention" || t == "full_attention"),
            "config.json: layer_types entries must be \"sliding_attention\" or "
            "\"full_attention\", got ",
            t.dump());
      c.layer_sliding.push_back(t == "sliding_attention");
    }
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    j["num_local_experts"] = c.num_experts;
    j["intermediate_size"] = c.moe_intermediate_size;
    j["attention_bias"] = c.attention_bias;
    j["hidden_act"] = "silu";
    j["swiglu_limit"] = c.swiglu_limit;
    j["sliding_window"] = c.sliding_window;
    j["router_aux_loss_coef"] = 0.9;
    nlohmann::json types = nlohmann::json::array();
    for (bool s : c.layer_sliding) types.push_back(s ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    j["rope_scaling"] = hf_keys::YarnJson(c.yarn, /*generic=*/true);
  }

  TensorNames HfTensorNames() const override {
    TensorNames n;
    n.router = "mlp.router.weight";
    n.router_linear_bias = "mlp.router.bias";
    return n;
  }

  bool GgufFeedForwardIsExpert() const override { return true; }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"attention.layer_norm_rms_epsilon", "expert_feed_forward_length",
            "attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa"};
  }

  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    c.norm_topk_prob = true;
    c.router_bias = true;
    c.attention_sinks = true;
    c.attention_out_bias = c.attention_bias;
    c.sliding_window = kKeys.PositiveInt(f, "attention.sliding_window");
    c.layer_sliding = AlternatingSlidingLayers(c.num_layers);
    // llama.cpp's per-layer flags (1: sliding), or every n-th layer full; absent: n = 2.
    if (const GgufValue* pattern = f.Find(kKeys.Key("attention.sliding_window_pattern"))) {
      std::vector<bool> sliding;
      if (pattern->is_array()) {
        for (const int64_t v : pattern->AsIntArray()) sliding.push_back(v != 0);
      } else {
        const int64_t n = pattern->AsInt();
        for (int l = 0; l < c.num_layers; ++l) sliding.push_back(n == 0 || l % n < n - 1);
      }
      Check(
          sliding == c.layer_sliding, f.path(), ": ", kKeys.Key("attention.sliding_window_pattern"),
          " = ", pattern->ToString(),
          ": gpt-oss layers other than alternating sliding/full (from sliding) are not supported");
    }
    c.swiglu_limit =
        static_cast<float>(f.GetFloat(kKeys.Key("swiglu_limit"), kLlamaCppSwigluLimit));
    const std::string rope_type = f.GetString(kKeys.Key("rope.scaling.type"), "none");
    Check(rope_type == "yarn" || llamacpp_keys::RopeScalingIsNone(f, kKeys.arch), f.path(), ": ",
          kKeys.Key("rope.scaling.type"), " '", rope_type,
          "' is not supported for gpt-oss (yarn, none, or linear with factor 0 or 1)");
    if (rope_type != "yarn") return;
    Yarn y;
    y.factor = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.factor")));
    y.original_max_position_embeddings =
        kKeys.PositiveInt(f, "rope.scaling.original_context_length");
    y.beta_fast = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.yarn_beta_fast"), 32.0));
    y.beta_slow = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.yarn_beta_slow"), 1.0));
    y.truncate = f.GetBool(kKeys.Key("rope.scaling.yarn_truncate"), false);
    c.yarn = y;
  }

  void WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const override {
    Check(c.layer_sliding == AlternatingSlidingLayers(c.num_layers),
          "gguf: gpt-oss layer_types other than alternating sliding/full (from sliding) have no "
          "llama.cpp key");
    kKeys.SetU32(w, "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
    if (c.swiglu_limit != kLlamaCppSwigluLimit) kKeys.SetF32(w, "swiglu_limit", c.swiglu_limit);
    if (!c.yarn) return;
    const Yarn& y = *c.yarn;
    w.Set(kKeys.Key("rope.scaling.type"), GgufValue::String("yarn"));
    kKeys.SetF32(w, "rope.scaling.factor", y.factor);
    kKeys.SetU32(w, "rope.scaling.original_context_length",
                 static_cast<uint32_t>(y.original_max_position_embeddings));
    kKeys.SetF32(w, "rope.scaling.yarn_beta_fast", y.beta_fast);
    kKeys.SetF32(w, "rope.scaling.yarn_beta_slow", y.beta_slow);
    if (y.truncate) w.Set(kKeys.Key("rope.scaling.yarn_truncate"), GgufValue::Bool(true));
  }

  // llama.cpp's gpt-oss names: post_attention_norm rather than ffn_norm, the router, and
  // the routed experts' per-layer biases as the _exps tensors' .bias.
  void GgufTensorNames(gguf_map::ArchNames& n) const override {
    for (gguf_map::NamePair& p : n.layer)
      if (p.gguf == "ffn_norm") p.gguf = "post_attention_norm";
    n.layer.push_back({"mlp.router", "ffn_gate_inp"});
    n.layer.push_back({"mlp.experts.gate_proj", "ffn_gate_exps"});
    n.layer.push_back({"mlp.experts.up_proj", "ffn_up_exps"});
    n.layer.push_back({"mlp.experts.down_proj", "ffn_down_exps"});
  }

  ModelConfig PublishedConfig() const override { return GptOssConfig(ModelSize::kFull); }
  ModelConfig RandomConfig(ModelSize size) const override { return GptOssConfig(size); }

  void Validate(const ModelConfig& c) const override {
    Check(c.router == RouterKind::kSoftmaxTopK,
          "config: gpt_oss routes by softmax over the top-k logits");
  }
};

}  // namespace

const Family& GptOssFamily() {
  static const GptOss family;
  return family;
}

}  // namespace moex

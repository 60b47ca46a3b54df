// MiniMax-M2 / M2.1 (HF MiniMaxM2Config, llama.cpp "minimax-m2"): GQA without biases,
// RMSNorm over the whole q and k projections (qk_norm_type "per_layer"), RoPE on each head's
// first rotary_dim values, and routing by sigmoid scores plus a correction bias
// (e_score_correction_bias) choosing the top k, the weights being the chosen sigmoid scores
// renormalised: DeepSeek-V3's gate in one group. No shared experts, no dense layers.
// Tensors: Mixtral's MoE names (block_sparse_moe.gate, experts.N.w1/w3/w2) plus the gate's
// correction bias beside it, and whole-width self_attn.q_norm / k_norm. The MTP modules are
// never looked up.
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

constexpr gguf_keys::ArchKeys kKeys{"minimax-m2"};

class MiniMaxM2 : public Family {
 public:
  MiniMaxM2()
      : Family({Arch::kMiniMaxM2,
                "minimax_m2",
                "MiniMaxM2ForCausalLM",
                kKeys.arch,
                {"minimax-m2", "minimaxm2"}},
               {.partial_rotary = true}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    using namespace hf_keys;
    c.num_experts = RequireInt(j, "num_local_experts");
    c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
    c.moe_intermediate_size = RequireInt(j, "intermediate_size");
    c.norm_topk_prob = true;
    c.routed_scaling_factor = OptionalFloat(j, "routed_scaling_factor", 1.0f);
    c.scale_normalised_weights = true;
    const std::string scoring = j.value("scoring_func", std::string("sigmoid"));
    Check(scoring == "sigmoid", "config.json: minimax_m2 scoring_func '", scoring,
          "' is not supported (sigmoid)");
    Check(OptionalBool(j, "use_routing_bias", true),
          "config.json: minimax_m2 without use_routing_bias is not supported");
    Check(!OptionalBool(j, "use_grouped_topk", false) || OptionalInt(j, "num_expert_group", 1) <= 1,
          "config.json: minimax_m2 grouped top-k over several groups is not supported");
    c.router = RouterKind::kGroupedTopK;
    c.scoring_func = ScoringFunc::kSigmoid;
    c.topk_method = TopKMethod::kNoauxTc;
    c.n_group = 1;
    c.topk_group = 1;
    c.qk_norm = OptionalBool(j, "use_qk_norm", true);
    c.qk_norm_per_head = false;
    const std::string qk_type = j.value("qk_norm_type", std::string("per_layer"));
    Check(qk_type == "per_layer", "config.json: minimax_m2 qk_norm_type '", qk_type,
          "' is not supported (per_layer)");
    if (auto w = j.find("attn_window_size"); w != j.end() && !w->is_null()) {
      const bool none = w->is_number_integer() ? w->get<int64_t>() <= 0 : false;
      Check(none, "config.json: minimax_m2 attn_window_size (sliding attention) is not supported");
    }
    CheckSilu(j, "minimax_m2");
    c.max_position_embeddings = OptionalInt(j, "max_position_embeddings", 196608);
    c.rope_dim = OptionalInt(j, "rotary_dim", c.head_dim);
    Check(c.rope_dim >= 2 && c.rope_dim <= c.head_dim, "config.json: rotary_dim (", c.rope_dim,
          ") must be in 2..head_dim (", c.head_dim, ")");
    if (c.rope_dim == c.head_dim) c.rope_dim = 0;  // Full rotary.
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    j["num_local_experts"] = c.num_experts;
    j["intermediate_size"] = c.moe_intermediate_size;
    j["rotary_dim"] = c.RotaryDim();
    j["scoring_func"] = "sigmoid";
    j["use_routing_bias"] = true;
    j["use_qk_norm"] = c.qk_norm;
    j["qk_norm_type"] = "per_layer";
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["hidden_act"] = "silu";
    j["rope_scaling"] = nullptr;
  }

  TensorNames HfTensorNames() const override {
    TensorNames n = BlockSparseMoeNames();
    n.router_bias = "block_sparse_moe.e_score_correction_bias";
    return n;
  }

  bool GgufFeedForwardIsExpert() const override { return true; }
  std::optional<bool> LlamaCppFixedTopKNorm() const override { return true; }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"attention.layer_norm_rms_epsilon", "expert_feed_forward_length", "expert_gating_func"};
  }

  // llama.cpp routes by expert_gating_func (its converter writes 2, sigmoid) with the
  // exp_probs_b correction bias and renormalised weights, rotates the first
  // rope.dimension_count values of each head, and normalises q and k over their whole
  // width (when the file has the norms).
  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    const int gating = kKeys.Int(f, "expert_gating_func", 2);
    Check(gating == 2, f.path(), ": ", kKeys.Key("expert_gating_func"), " ", gating,
          " is not supported (2, sigmoid)");
    c.router = RouterKind::kGroupedTopK;
    c.scoring_func = ScoringFunc::kSigmoid;
    c.topk_method = TopKMethod::kNoauxTc;
    c.scale_normalised_weights = true;
    c.n_group = 1;
    c.topk_group = 1;
    const int rot = kKeys.Int(f, "rope.dimension_count", c.head_dim);
    c.rope_dim = rot == c.head_dim ? 0 : rot;
    c.qk_norm = f.FindTensorInfo("blk.0.attn_q_norm.weight") != nullptr;
    c.qk_norm_per_head = false;
  }

  void WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const override {
    kKeys.SetU32(w, "expert_gating_func", 2);
    kKeys.SetU32(w, "rope.dimension_count", c.RotaryDim());
  }

  void GgufTensorNames(gguf_map::ArchNames& n) const override { BlockSparseMoeGgufNames(n); }

  // MiniMax-M2 (230B-A10B; its published checkpoint is FP8).
  ModelConfig PublishedConfig() const override {
    ModelConfig c = BaseConfig(arch());
    c.vocab_size = 200064;
    c.hidden_size = 3072;
    c.num_layers = 62;
    c.num_heads = 48;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.rope_dim = 64;
    c.num_experts = 256;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 1536;
    c.rope_theta = 5e6f;
    c.rms_norm_eps = 1e-6f;
    c.router = RouterKind::kGroupedTopK;
    c.scoring_func = ScoringFunc::kSigmoid;
    c.topk_method = TopKMethod::kNoauxTc;
    c.norm_topk_prob = true;
    c.scale_normalised_weights = true;
    c.qk_norm = true;
    c.max_position_embeddings = 196608;
    c.eos_token_ids = {200020};
    return c;
  }
};

}  // namespace

const Family& MiniMaxM2Family() {
  static const MiniMaxM2 family;
  return family;
}

}  // namespace moex

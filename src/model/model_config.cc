#include "model/model_config.h"

#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moex {

namespace {

struct ArchEntry {
  Arch arch;
  const char* name;
};
constexpr ArchEntry kArchNames[] = {
    {Arch::kMixtral, "mixtral"},
    {Arch::kPhiMoe, "phimoe"},
    {Arch::kQwen2Moe, "qwen2_moe"},
    {Arch::kQwen3Moe, "qwen3_moe"},
    {Arch::kOlmoe, "olmoe"},
    {Arch::kDeepseekMoe, "deepseek"},
    {Arch::kDeepseekV2, "deepseek_v2"},
    {Arch::kDeepseekV3, "deepseek_v3"},
    {Arch::kGlm4Moe, "glm4_moe"},
    {Arch::kGptOss, "gpt_oss"},
    {Arch::kMiniMaxM2, "minimax_m2"},
};

int RequireInt(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  Check(it != j.end() && it->is_number_integer(), "config.json: missing integer field '", key, "'");
  const int64_t v = it->get<int64_t>();
  Check(v >= 0 && v < (1ll << 31), "config.json: field '", key, "' out of range: ", v);
  return static_cast<int>(v);
}

int OptionalInt(const nlohmann::json& j, const char* key, int fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  Check(it->is_number_integer(), "config.json: field '", key, "' must be an integer");
  // Read wide and checked: a value past int's range must not wrap (2^32 + 512 read as 512).
  const int64_t v =
      it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX ? INT64_MAX : it->get<int64_t>();
  Check(v >= INT32_MIN && v <= INT32_MAX, "config.json: field '", key,
        "' out of range: ", it->dump());
  return static_cast<int>(v);
}

float OptionalFloat(const nlohmann::json& j, const char* key, float fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  Check(it->is_number(), "config.json: field '", key, "' must be a number");
  return it->get<float>();
}

bool OptionalBool(const nlohmann::json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  Check(it->is_boolean(), "config.json: field '", key, "' must be true or false");
  return it->get<bool>();
}

double OptionalDouble(const nlohmann::json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  Check(it->is_number(), "config.json: field '", key, "' must be a number");
  return it->get<double>();
}

// Phi-3.5-MoE (HF PhimoeConfig): Mixtral's expert names, LayerNorm with bias, sparsemixer
// routing, biases on every attention projection (o_proj too) and on lm_head. Defaults are
// PhimoeConfig's, for keys a config.json leaves out.
void ParsePhiMoe(const nlohmann::json& j, ModelConfig& c) {
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
  if (auto act = j.find("hidden_act"); act != j.end() && !act->is_null()) {
    Check(act->is_string() && act->get<std::string>() == "silu",
          "config.json: phimoe hidden_act must be \"silu\", got ", act->dump());
  }
  // PhimoeAttention always uses hidden_size / num_attention_heads.
  if (c.num_heads > 0) {
    Check(c.head_dim * c.num_heads == c.hidden_size, "config.json: phimoe needs head_dim (",
          c.head_dim, ") = hidden_size / num_attention_heads (", c.hidden_size, " / ", c.num_heads,
          ")");
  }
}

// DeepSeek-V2 / V2-Lite / V3 (HF DeepseekV2Config / DeepseekV3Config, whose defaults fill
// the keys a config.json leaves out): MLA, the grouped gate, shared experts, leading dense
// layers. V3's multi-token-prediction layers are read from the config and not run.
// The expert-layout keys every DeepSeek config (v1, V2, V3) spells the same way.
void ParseDeepseekExperts(const nlohmann::json& j, ModelConfig& c) {
  c.num_experts = RequireInt(j, "n_routed_experts");
  c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
  c.moe_intermediate_size = RequireInt(j, "moe_intermediate_size");
  c.intermediate_size = RequireInt(j, "intermediate_size");
  c.first_k_dense_replace = OptionalInt(j, "first_k_dense_replace", 0);
  c.moe_layer_freq = OptionalInt(j, "moe_layer_freq", 1);
}

void ParseDeepseekMla(const nlohmann::json& j, ModelConfig& c) {
  const bool v3 = c.arch == Arch::kDeepseekV3;
  ParseDeepseekExperts(j, c);
  c.norm_topk_prob = OptionalBool(j, "norm_topk_prob", v3);
  c.routed_scaling_factor = OptionalFloat(j, "routed_scaling_factor", v3 ? 2.5f : 1.0f);
  c.scale_normalised_weights = v3;
  const int shared = OptionalInt(j, "n_shared_experts", 0);
  Check(shared >= 0 && shared <= 1024, "config.json: n_shared_experts must be in 0..1024, got ",
        shared);
  c.shared_expert_intermediate_size = shared * c.moe_intermediate_size;
  Check(!OptionalBool(j, "attention_bias", false),
        "config.json: attention_bias = true is not supported for ", ArchName(c.arch));
  if (auto act = j.find("hidden_act"); act != j.end() && !act->is_null()) {
    Check(act->is_string() && act->get<std::string>() == "silu", "config.json: ", ArchName(c.arch),
          " hidden_act must be \"silu\", got ", act->dump());
  }
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

// GLM-4.5 / 4.5-Air / 4.6 / 4.7 (HF Glm4MoeConfig, whose defaults fill the keys a
// config.json leaves out): GQA with q/k/v biases (attention_bias) and optional per-head
// q/k RMSNorm (use_qk_norm), RoPE on the first head_dim * partial_rotary_factor values of
// each head, DeepSeek-V3's gate (sigmoid, correction bias, noaux_tc groups, always scaled),
// n_shared_experts shared experts and first_k_dense_replace dense layers. HF's Glm4MoeMoE
// has no scoring_func/topk_method/moe_layer_freq keys: they are not read.
void ParseGlm4Moe(const nlohmann::json& j, ModelConfig& c) {
  c.num_experts = RequireInt(j, "n_routed_experts");
  c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
  c.moe_intermediate_size = RequireInt(j, "moe_intermediate_size");
  c.intermediate_size = RequireInt(j, "intermediate_size");
  c.first_k_dense_replace = OptionalInt(j, "first_k_dense_replace", 1);
  c.moe_layer_freq = 1;
  c.norm_topk_prob = OptionalBool(j, "norm_topk_prob", true);
  c.routed_scaling_factor = OptionalFloat(j, "routed_scaling_factor", 1.0f);
  c.scale_normalised_weights = true;
  const int shared = OptionalInt(j, "n_shared_experts", 1);
  Check(shared >= 0 && shared <= 1024, "config.json: n_shared_experts must be in 0..1024, got ",
        shared);
  c.shared_expert_intermediate_size = shared * c.moe_intermediate_size;
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
  if (auto act = j.find("hidden_act"); act != j.end() && !act->is_null()) {
    Check(act->is_string() && act->get<std::string>() == "silu",
          "config.json: glm4_moe hidden_act must be \"silu\", got ", act->dump());
  }
  double factor = OptionalDouble(j, "partial_rotary_factor", 0.5);
  // transformers 5 also writes rope_parameters {rope_type, rope_theta, partial_rotary_factor};
  // a value given in both places must agree.
  if (auto rp = j.find("rope_parameters"); rp != j.end() && !rp->is_null()) {
    Check(rp->is_object(), "config.json: rope_parameters must be an object or null");
    const std::string type = rp->value("rope_type", std::string("default"));
    Check(type == "default", "config.json: rope_parameters.rope_type '", type,
          "' is not supported for glm4_moe (default only)");
    if (auto f = rp->find("partial_rotary_factor"); f != rp->end()) {
      Check(f->is_number(), "config.json: rope_parameters.partial_rotary_factor must be a number");
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

// MiniMax-M2 / M2.1 (HF MiniMaxM2Config): GQA without biases, RMSNorm over the whole q and
// k projections (qk_norm_type "per_layer"), RoPE on each head's first rotary_dim values,
// and routing by sigmoid scores plus a correction bias (e_score_correction_bias) choosing
// the top k, the weights being the chosen sigmoid scores renormalised: DeepSeek-V3's gate
// in one group. No shared experts, no dense layers.
void ParseMiniMaxM2(const nlohmann::json& j, ModelConfig& c) {
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
  if (auto act = j.find("hidden_act"); act != j.end() && !act->is_null()) {
    Check(act->is_string() && act->get<std::string>() == "silu",
          "config.json: minimax_m2 hidden_act must be \"silu\", got ", act->dump());
  }
  c.max_position_embeddings = OptionalInt(j, "max_position_embeddings", 196608);
  c.rope_dim = OptionalInt(j, "rotary_dim", c.head_dim);
  Check(c.rope_dim >= 2 && c.rope_dim <= c.head_dim, "config.json: rotary_dim (", c.rope_dim,
        ") must be in 2..head_dim (", c.head_dim, ")");
  if (c.rope_dim == c.head_dim) c.rope_dim = 0;  // Full rotary.
}

// YaRN (DeepSeek-V2/V3 only): factor and original_max_position_embeddings are required,
// the rest default as in HF's DeepseekV2YarnRotaryEmbedding.
Yarn ParseYarn(const nlohmann::json& rs) {
  Yarn y;
  y.factor = OptionalFloat(rs, "factor", 0.0f);
  Check(std::isfinite(y.factor) && y.factor >= 1.0f,
        "config.json: rope_scaling yarn needs factor >= 1, got ", y.factor);
  y.original_max_position_embeddings = OptionalInt(rs, "original_max_position_embeddings", 0);
  Check(y.original_max_position_embeddings > 0,
        "config.json: rope_scaling yarn needs original_max_position_embeddings > 0");
  y.beta_fast = OptionalFloat(rs, "beta_fast", 32.0f);
  y.beta_slow = OptionalFloat(rs, "beta_slow", 1.0f);
  y.mscale = OptionalFloat(rs, "mscale", 1.0f);
  y.mscale_all_dim = OptionalFloat(rs, "mscale_all_dim", 0.0f);
  return y;
}

std::vector<float> FactorList(const nlohmann::json& rs, const char* key, int head_dim) {
  auto it = rs.find(key);
  Check(it != rs.end() && it->is_array(), "config.json: rope_scaling.", key,
        " must be a list of numbers");
  const size_t want = static_cast<size_t>(head_dim / 2);
  Check(it->size() == want, "config.json: rope_scaling.", key, " has ", it->size(),
        " entries, expected head_dim / 2 = ", want);
  std::vector<float> out;
  for (const auto& v : *it) {
    Check(v.is_number(), "config.json: rope_scaling.", key, " must hold numbers only");
    const double f = v.get<double>();
    Check(std::isfinite(f) && f > 0, "config.json: rope_scaling.", key,
          " entries must be finite and > 0, got ", f);
    out.push_back(static_cast<float>(f));
  }
  return out;
}

// HF's generic YaRN (_compute_yarn_parameters), as gpt-oss configures it: cos/sin times
// attention_factor = 0.1 ln(factor) + 1 (the DeepSeek form with mscale 1, mscale_all_dim 0)
// and `truncate` (default true) rounding the correction range. The keys that change the
// magnitude in other ways (attention_factor, mscale, mscale_all_dim) are refused, and so
// is a factor that disagrees with max_position_embeddings / original (transformers
// versions differ in which of the two they use).
Yarn ParseGenericYarn(const nlohmann::json& rs, const ModelConfig& c) {
  for (const char* key : {"attention_factor", "mscale", "mscale_all_dim"}) {
    auto it = rs.find(key);
    Check(it == rs.end() || it->is_null(), "config.json: rope_scaling.", key,
          " is not supported for ", ArchName(c.arch));
  }
  Yarn y = ParseYarn(rs);
  y.truncate = OptionalBool(rs, "truncate", true);
  const double implied =
      static_cast<double>(c.max_position_embeddings) / y.original_max_position_embeddings;
  Check(std::abs(implied - y.factor) <= 1e-6 * y.factor, "config.json: rope_scaling.factor (",
        y.factor, ") must equal max_position_embeddings / original_max_position_embeddings (",
        c.max_position_embeddings, " / ", y.original_max_position_embeddings, ")");
  return y;
}

// gpt-oss (HF GptOssConfig, whose defaults fill the keys a config.json leaves out): GQA
// with biases on q/k/v/o, a learned sink logit per head, sliding-window layers (layer_types,
// default alternating from sliding), router with bias, experts with biases and the clamped
// SwiGLU (swiglu_limit), softmax over the top-k router logits.
void ParseGptOss(const nlohmann::json& j, ModelConfig& c) {
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
  if (auto act = j.find("hidden_act"); act != j.end() && !act->is_null()) {
    Check(act->is_string() && act->get<std::string>() == "silu",
          "config.json: gpt_oss hidden_act must be \"silu\", got ", act->dump());
  }
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

// rope_scaling: null or {"type": "default"} is plain RoPE; "longrope" (and its old name
// "su") is accepted for phimoe, as PhimoeRotaryEmbedding computes it.
void ParseRopeScaling(const nlohmann::json& j, ModelConfig& c) {
  auto rs = j.find("rope_scaling");
  if (rs == j.end() || rs->is_null()) return;
  Check(rs->is_object(), "config.json: rope_scaling must be an object or null");
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (auto t = rs->find(key); t != rs->end() && !t->is_null()) {
      Check(t->is_string(), "config.json: rope_scaling.", key, " must be a string");
      type = t->get<std::string>();
      break;
    }
  }
  if (type == "default") return;
  if (type == "yarn") {
    Check(c.IsDeepseekMla() || c.arch == Arch::kGptOss,
          "config.json: rope_scaling type "
          "'yarn' is supported for deepseek_v2, deepseek_v3 and gpt_oss only, not ",
          ArchName(c.arch));
    c.yarn = c.arch == Arch::kGptOss ? ParseGenericYarn(*rs, c) : ParseYarn(*rs);
    return;
  }
  Check(type == "longrope" || type == "su", "config.json: rope_scaling type '", type,
        "' is not supported");
  Check(c.arch == Arch::kPhiMoe, "config.json: rope_scaling type '", type,
        "' is supported for phimoe only, not ", ArchName(c.arch));
  LongRope lr;
  lr.short_factor = FactorList(*rs, "short_factor", c.head_dim);
  lr.long_factor = FactorList(*rs, "long_factor", c.head_dim);
  // The switch between the two sets: rope_scaling's original_max_position_embeddings
  // (PhimoeConfig copies it to the top level; a different top-level value is ambiguous).
  int original = OptionalInt(*rs, "original_max_position_embeddings", 0);
  const int top = OptionalInt(j, "original_max_position_embeddings", 0);
  Check(original == 0 || top == 0 || original == top,
        "config.json: original_max_position_embeddings is ", top, " but rope_scaling says ",
        original);
  if (original == 0) original = top;
  Check(original > 0, "config.json: longrope needs original_max_position_embeddings > 0");
  lr.original_max_position_embeddings = original;
  // PhimoeRotaryEmbedding multiplies cos and sin by short_mscale or long_mscale (PhimoeConfig
  // requires both); HF's generic attention factor applies only when they are absent.
  const double factor = static_cast<double>(c.max_position_embeddings) / original;
  double fallback = OptionalDouble(*rs, "attention_factor", 0.0);
  if (fallback <= 0)
    fallback = factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(original));
  lr.short_mscale = static_cast<float>(OptionalDouble(*rs, "short_mscale", fallback));
  lr.long_mscale = static_cast<float>(OptionalDouble(*rs, "long_mscale", fallback));
  Check(std::isfinite(lr.short_mscale) && std::isfinite(lr.long_mscale) && lr.short_mscale > 0 &&
            lr.long_mscale > 0,
        "config.json: rope_scaling short_mscale and long_mscale must be finite and > 0");
  c.longrope = std::move(lr);
}

}  // namespace

std::vector<bool> AlternatingSlidingLayers(int num_layers) {
  std::vector<bool> sliding;
  for (int l = 0; l < num_layers; ++l) sliding.push_back(l % 2 == 0);
  return sliding;
}

const char* ArchName(Arch arch) {
  for (const auto& e : kArchNames)
    if (e.arch == arch) return e.name;
  return "?";
}

Arch ParseArch(const std::string& name) {
  for (const auto& e : kArchNames)
    if (name == e.name) return e.arch;
  if (name == "deepseek_moe" || name == "deepseek-moe") return Arch::kDeepseekMoe;
  if (name == "qwen1.5_moe" || name == "qwen2moe") return Arch::kQwen2Moe;
  if (name == "qwen3moe") return Arch::kQwen3Moe;
  if (name == "phi3.5_moe" || name == "phi-moe") return Arch::kPhiMoe;
  if (name == "deepseek-v2" || name == "deepseek2") return Arch::kDeepseekV2;
  if (name == "deepseek-v3" || name == "deepseek3") return Arch::kDeepseekV3;
  if (name == "glm4moe" || name == "glm4.5") return Arch::kGlm4Moe;
  if (name == "gpt-oss" || name == "gptoss") return Arch::kGptOss;
  if (name == "minimax-m2" || name == "minimaxm2") return Arch::kMiniMaxM2;
  Fail("unsupported architecture '", name,
       "' (supported: mixtral, phimoe, qwen2_moe, qwen3_moe, olmoe, deepseek, deepseek_v2, "
       "deepseek_v3, glm4_moe, gpt_oss, minimax_m2)");
}

ModelConfig ModelConfig::FromHfJson(const nlohmann::json& j) {
  Check(j.is_object(), "config.json: top level must be an object");
  auto mt = j.find("model_type");
  Check(mt != j.end() && !mt->is_null(), "config.json: missing 'model_type'");
  Check(mt->is_string(), "config.json: 'model_type' must be a string such as \"olmoe\", got ",
        mt->dump());
  ModelConfig c;
  c.arch = ParseArch(mt->get<std::string>());
  c.vocab_size = RequireInt(j, "vocab_size");
  c.hidden_size = RequireInt(j, "hidden_size");
  c.num_layers = RequireInt(j, "num_hidden_layers");
  c.num_heads = RequireInt(j, "num_attention_heads");
  c.num_kv_heads = OptionalInt(j, "num_key_value_heads", c.num_heads);
  c.head_dim = OptionalInt(j, "head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.rms_norm_eps = OptionalFloat(j, "rms_norm_eps", 1e-5f);
  c.rope_theta = OptionalFloat(j, "rope_theta", 10000.0f);
  c.max_position_embeddings = OptionalInt(j, "max_position_embeddings", 4096);
  c.tie_word_embeddings = OptionalBool(j, "tie_word_embeddings", false);
  c.bos_token_id = OptionalInt(j, "bos_token_id", -1);
  if (auto eos = j.find("eos_token_id"); eos != j.end() && !eos->is_null()) {
    if (eos->is_array()) {
      for (const auto& e : *eos) {
        Check(e.is_number_integer(), "config.json: eos_token_id entries must be integers");
        c.eos_token_ids.push_back(e.get<int>());
      }
    } else {
      Check(eos->is_number_integer(), "config.json: eos_token_id must be an integer or list");
      c.eos_token_ids.push_back(eos->get<int>());
    }
  }

  switch (c.arch) {
    case Arch::kMixtral:
      c.num_experts = RequireInt(j, "num_local_experts");
      c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
      c.moe_intermediate_size = RequireInt(j, "intermediate_size");
      c.norm_topk_prob = true;  // softmax over the top-k logits == renormalised top-k.
      break;
    case Arch::kPhiMoe:
      ParsePhiMoe(j, c);
      break;
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe:
      c.num_experts = RequireInt(j, "num_experts");
      c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
      c.moe_intermediate_size = RequireInt(j, "moe_intermediate_size");
      c.intermediate_size = OptionalInt(j, "intermediate_size", 0);
      c.norm_topk_prob = OptionalBool(j, "norm_topk_prob", false);
      c.moe_layer_freq = OptionalInt(j, "decoder_sparse_step", 1);
      if (auto mlp_only = j.find("mlp_only_layers");
          mlp_only != j.end() && mlp_only->is_array() && !mlp_only->empty()) {
        Fail("config.json: mlp_only_layers is not supported yet");
      }
      if (c.arch == Arch::kQwen2Moe) {
        c.attention_bias = true;  // Qwen2 attention always has q/k/v biases.
        c.shared_expert_intermediate_size = OptionalInt(j, "shared_expert_intermediate_size", 0);
        c.shared_expert_gate = c.shared_expert_intermediate_size > 0;
      } else {
        c.attention_bias = OptionalBool(j, "attention_bias", false);
        c.qk_norm = true;
        c.qk_norm_per_head = true;
      }
      break;
    case Arch::kOlmoe:
      c.num_experts = RequireInt(j, "num_experts");
      c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
      c.moe_intermediate_size = RequireInt(j, "intermediate_size");
      c.norm_topk_prob = OptionalBool(j, "norm_topk_prob", false);
      c.attention_bias = OptionalBool(j, "attention_bias", false);
      c.qk_norm = true;
      c.qk_norm_per_head = false;
      if (auto clip = j.find("clip_qkv"); clip != j.end() && !clip->is_null())
        Fail("config.json: clip_qkv is not supported yet");
      break;
    case Arch::kDeepseekMoe: {
      ParseDeepseekExperts(j, c);
      c.norm_topk_prob = OptionalBool(j, "norm_topk_prob", false);
      c.routed_scaling_factor = OptionalFloat(j, "routed_scaling_factor", 1.0f);
      const int shared = OptionalInt(j, "n_shared_experts", 0);
      Check(shared >= 0 && shared <= 1024, "config.json: n_shared_experts must be in 0..1024, got ",
            shared);
      c.shared_expert_intermediate_size = shared * c.moe_intermediate_size;
      c.attention_bias = OptionalBool(j, "attention_bias", false);
      const std::string scoring = j.value("scoring_func", std::string("softmax"));
      Check(scoring == "softmax", "config.json: scoring_func '", scoring, "' is not supported");
      break;
    }
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3:
      ParseDeepseekMla(j, c);
      break;
    case Arch::kGlm4Moe:
      ParseGlm4Moe(j, c);
      break;
    case Arch::kGptOss:
      ParseGptOss(j, c);
      break;
    case Arch::kMiniMaxM2:
      ParseMiniMaxM2(j, c);
      break;
  }
  ParseRopeScaling(j, c);
  c.Validate();
  return c;
}

nlohmann::json ModelConfig::ToHfJson() const {
  nlohmann::json j;
  j["model_type"] = ArchName(arch);
  j["architectures"] = nlohmann::json::array();
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["max_position_embeddings"] = max_position_embeddings;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["torch_dtype"] = "bfloat16";
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1)
    j["eos_token_id"] = eos_token_ids[0];
  else if (!eos_token_ids.empty())
    j["eos_token_id"] = eos_token_ids;
  j["num_experts_per_tok"] = num_experts_per_tok;
  // The expert layout keys every DeepSeek config spells the same way.
  const auto deepseek_experts = [&] {
    j["n_routed_experts"] = num_experts;
    j["moe_intermediate_size"] = moe_intermediate_size;
    j["intermediate_size"] = intermediate_size;
    j["first_k_dense_replace"] = first_k_dense_replace;
    j["moe_layer_freq"] = moe_layer_freq;
    j["n_shared_experts"] =
        moe_intermediate_size > 0 ? shared_expert_intermediate_size / moe_intermediate_size : 0;
    j["norm_topk_prob"] = norm_topk_prob;
  };
  // rope_scaling: DeepSeek's YaRN keys, or HF's generic ones (gpt-oss: rope_type, truncate).
  const auto yarn_json = [&] {
    j["rope_scaling"] = nullptr;
    if (!yarn) return;
    j["rope_scaling"] = {
        {"factor", yarn->factor},
        {"original_max_position_embeddings", yarn->original_max_position_embeddings},
        {"beta_fast", yarn->beta_fast},
        {"beta_slow", yarn->beta_slow}};
    if (arch == Arch::kGptOss) {
      j["rope_scaling"]["rope_type"] = "yarn";
      j["rope_scaling"]["truncate"] = yarn->truncate;
    } else {
      j["rope_scaling"]["type"] = "yarn";
      j["rope_scaling"]["mscale"] = yarn->mscale;
      j["rope_scaling"]["mscale_all_dim"] = yarn->mscale_all_dim;
    }
  };
  switch (arch) {
    case Arch::kMixtral:
      j["architectures"].push_back("MixtralForCausalLM");
      j["num_local_experts"] = num_experts;
      j["intermediate_size"] = moe_intermediate_size;
      break;
    case Arch::kPhiMoe:
      j["architectures"].push_back("PhiMoEForCausalLM");
      j["num_local_experts"] = num_experts;
      j["intermediate_size"] = moe_intermediate_size;
      j["attention_bias"] = attention_bias;
      j["lm_head_bias"] = lm_head_bias;
      j["hidden_act"] = "silu";
      j["router_jitter_noise"] = router_jitter_noise;
      j["input_jitter_noise"] = 0.0;
      j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nullptr;
      j["rope_scaling"] = nullptr;
      if (longrope) {
        j["original_max_position_embeddings"] = longrope->original_max_position_embeddings;
        j["rope_scaling"] = {
            {"type", "longrope"},
            {"short_factor", longrope->short_factor},
            {"long_factor", longrope->long_factor},
            {"short_mscale", longrope->short_mscale},
            {"long_mscale", longrope->long_mscale},
            {"original_max_position_embeddings", longrope->original_max_position_embeddings}};
      }
      break;
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe:
      j["architectures"].push_back(arch == Arch::kQwen2Moe ? "Qwen2MoeForCausalLM"
                                                           : "Qwen3MoeForCausalLM");
      j["num_experts"] = num_experts;
      j["moe_intermediate_size"] = moe_intermediate_size;
      j["intermediate_size"] = intermediate_size;
      j["norm_topk_prob"] = norm_topk_prob;
      j["decoder_sparse_step"] = moe_layer_freq;
      j["mlp_only_layers"] = nlohmann::json::array();
      if (arch == Arch::kQwen2Moe)
        j["shared_expert_intermediate_size"] = shared_expert_intermediate_size;
      else
        j["attention_bias"] = attention_bias;
      break;
    case Arch::kOlmoe:
      j["architectures"].push_back("OlmoeForCausalLM");
      j["num_experts"] = num_experts;
      j["intermediate_size"] = moe_intermediate_size;
      j["norm_topk_prob"] = norm_topk_prob;
      j["attention_bias"] = attention_bias;
      j["clip_qkv"] = nullptr;
      break;
    case Arch::kDeepseekMoe:
      j["architectures"].push_back("DeepseekForCausalLM");
      deepseek_experts();
      j["scoring_func"] = "softmax";
      j["attention_bias"] = attention_bias;
      break;
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3: {
      j["architectures"].push_back(arch == Arch::kDeepseekV2 ? "DeepseekV2ForCausalLM"
                                                             : "DeepseekV3ForCausalLM");
      deepseek_experts();
      j["routed_scaling_factor"] = routed_scaling_factor;
      j["scoring_func"] = scoring_func == ScoringFunc::kSigmoid ? "sigmoid" : "softmax";
      j["topk_method"] = topk_method == TopKMethod::kGreedy               ? "greedy"
                         : topk_method == TopKMethod::kGroupLimitedGreedy ? "group_limited_greedy"
                                                                          : "noaux_tc";
      j["n_group"] = n_group;
      j["topk_group"] = topk_group;
      j["attention_bias"] = false;
      j["hidden_act"] = "silu";
      if (arch == Arch::kDeepseekV3) j["num_nextn_predict_layers"] = num_nextn_predict_layers;
      if (mla) {
        j["q_lora_rank"] = mla->q_lora_rank > 0 ? nlohmann::json(mla->q_lora_rank) : nullptr;
        j["kv_lora_rank"] = mla->kv_lora_rank;
        j["qk_nope_head_dim"] = mla->qk_nope_head_dim;
        j["qk_rope_head_dim"] = mla->qk_rope_head_dim;
        j["v_head_dim"] = mla->v_head_dim;
      }
      j.erase("head_dim");  // DeepSeek's configs have none (head_dim is qk_rope_head_dim).
      yarn_json();
      break;
    }
    case Arch::kGptOss: {
      j["architectures"].push_back("GptOssForCausalLM");
      j["num_local_experts"] = num_experts;
      j["intermediate_size"] = moe_intermediate_size;
      j["attention_bias"] = attention_bias;
      j["hidden_act"] = "silu";
      j["swiglu_limit"] = swiglu_limit;
      j["sliding_window"] = sliding_window;
      j["router_aux_loss_coef"] = 0.9;
      nlohmann::json types = nlohmann::json::array();
      for (bool s : layer_sliding) types.push_back(s ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
      yarn_json();
      break;
    }
    case Arch::kGlm4Moe:
      j["architectures"].push_back("Glm4MoeForCausalLM");
      deepseek_experts();
      j.erase("moe_layer_freq");  // Not a Glm4MoeConfig key: every layer past the dense ones.
      j["routed_scaling_factor"] = routed_scaling_factor;
      j["n_group"] = n_group;
      j["topk_group"] = topk_group;
      j["attention_bias"] = attention_bias;
      j["use_qk_norm"] = qk_norm;
      j["partial_rotary_factor"] = static_cast<double>(RotaryDim()) / head_dim;
      j["hidden_act"] = "silu";
      j["num_nextn_predict_layers"] = num_nextn_predict_layers;
      j["rope_scaling"] = nullptr;
      break;
    case Arch::kMiniMaxM2:
      j["architectures"].push_back("MiniMaxM2ForCausalLM");
      j["num_local_experts"] = num_experts;
      j["intermediate_size"] = moe_intermediate_size;
      j["rotary_dim"] = RotaryDim();
      j["scoring_func"] = "sigmoid";
      j["use_routing_bias"] = true;
      j["use_qk_norm"] = qk_norm;
      j["qk_norm_type"] = "per_layer";
      j["routed_scaling_factor"] = routed_scaling_factor;
      j["hidden_act"] = "silu";
      j["rope_scaling"] = nullptr;
      break;
  }
  return j;
}

void ModelConfig::Validate() const {
  // MLA first: its head_dim is qk_rope_head_dim, which the generic checks would name.
  if (mla) {
    Check(mla->q_lora_rank >= 0 && mla->kv_lora_rank > 0 && mla->qk_nope_head_dim > 0 &&
              mla->qk_rope_head_dim > 0 && mla->v_head_dim > 0,
          "config: MLA needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim > 0 "
          "and q_lora_rank >= 0 (got ",
          mla->kv_lora_rank, ", ", mla->qk_nope_head_dim, ", ", mla->qk_rope_head_dim, ", ",
          mla->v_head_dim, ", ", mla->q_lora_rank, ")");
    Check(head_dim == mla->qk_rope_head_dim && num_kv_heads == num_heads,
          "config: with MLA, head_dim must equal qk_rope_head_dim (", mla->qk_rope_head_dim,
          ") and num_key_value_heads num_attention_heads (", num_heads, ")");
  }
  const std::pair<const char*, int> positive[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"num_hidden_layers", num_layers},
      {"num_attention_heads", num_heads},
      {"num_key_value_heads", num_kv_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings (context_length in GGUF)", max_position_embeddings}};
  for (const auto& [name, value] : positive) Check(value > 0, "config: ", name, " must be > 0, got ", value);
  Check(num_heads % num_kv_heads == 0, "config: num_attention_heads (", num_heads,
        ") must be a multiple of num_key_value_heads (", num_kv_heads, ")");
  Check(head_dim % 2 == 0, "config: head_dim must be even for RoPE, got ", head_dim);
  Check(num_experts > 0 && num_experts_per_tok > 0 && num_experts_per_tok <= num_experts,
        "config: need 0 < num_experts_per_tok (", num_experts_per_tok, ") <= num_experts (",
        num_experts, ")");
  Check(moe_intermediate_size > 0, "config: expert intermediate size must be > 0, got ",
        moe_intermediate_size);
  Check(moe_layer_freq > 0, "config: moe_layer_freq must be > 0, got ", moe_layer_freq);
  Check(first_k_dense_replace >= 0 && first_k_dense_replace <= num_layers,
        "config: first_k_dense_replace must be in 0..num_hidden_layers (", num_layers, "), got ",
        first_k_dense_replace);
  Check(first_k_dense_replace == 0 || intermediate_size > 0,
        "config: dense layers need intermediate_size > 0");
  Check(std::isfinite(rms_norm_eps) && rms_norm_eps > 0,
        "config: rms_norm_eps must be a finite "
        "number > 0, got ",
        rms_norm_eps);
  Check(std::isfinite(rope_theta) && rope_theta > 0,
        "config: rope_theta (rope.freq_base in GGUF) must be a finite number > 0, got ",
        rope_theta);
  Check(std::isfinite(routed_scaling_factor) && routed_scaling_factor > 0,
        "config: routed_scaling_factor must be a finite number > 0, got ", routed_scaling_factor);
  Check(shared_expert_intermediate_size >= 0,
        "config: shared expert intermediate size must be >= 0, got ",
        shared_expert_intermediate_size);
  // DeepSeek's config.json states n_shared_experts, so the size must be a whole number of
  // experts or it would not survive a round trip through config.json.
  Check(!IsDeepseekMla() || mla.has_value(), "config: ", ArchName(arch),
        " needs the MLA sizes (kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)");
  Check(!mla || IsDeepseekMla(), "config: MLA is defined for deepseek_v2 and deepseek_v3 only");
  if (yarn) {
    Check(IsDeepseekMla() || arch == Arch::kGptOss,
          "config: YaRN rope scaling is supported for deepseek_v2/v3 and gpt_oss only");
    Check(yarn->truncate || arch == Arch::kGptOss,
          "config: YaRN without truncate is HF's generic YaRN (gpt_oss), not DeepSeek's");
    Check(std::isfinite(yarn->factor) && yarn->factor >= 1.0f,
          "config: YaRN factor must be >= 1, got ", yarn->factor);
    Check(yarn->original_max_position_embeddings > 0,
          "config: YaRN original_max_position_embeddings must be > 0");
    Check(std::isfinite(yarn->beta_fast) && std::isfinite(yarn->beta_slow) && yarn->beta_fast > 0 &&
              yarn->beta_slow > 0,
          "config: YaRN beta_fast and beta_slow must be finite and > 0");
    Check(std::isfinite(yarn->mscale) && std::isfinite(yarn->mscale_all_dim),
          "config: YaRN mscale and mscale_all_dim must be finite");
  }
  Check(!longrope || !yarn, "config: LongRoPE and YaRN cannot both be set");
  if (router == RouterKind::kGroupedTopK) {
    Check(n_group > 0 && num_experts % n_group == 0, "config: n_group (", n_group,
          ") must be > 0 and divide n_routed_experts (", num_experts, ")");
    Check(topk_group > 0 && topk_group <= n_group, "config: topk_group (", topk_group,
          ") must be in 1..n_group (", n_group, ")");
    Check(num_experts_per_tok <= topk_group * (num_experts / n_group),
          "config: num_experts_per_tok (", num_experts_per_tok, ") exceeds the experts of the ",
          topk_group, " selected groups (", topk_group * (num_experts / n_group), ")");
    Check(topk_method != TopKMethod::kNoauxTc || num_experts / n_group >= 2,
          "config: noaux_tc ranks groups by their top-2 scores and needs >= 2 experts per group");
  }
  Check(num_nextn_predict_layers >= 0, "config: num_nextn_predict_layers must be >= 0, got ",
        num_nextn_predict_layers);
  Check((arch != Arch::kDeepseekMoe && arch != Arch::kGlm4Moe && !IsDeepseekMla()) ||
            shared_expert_intermediate_size % moe_intermediate_size == 0,
        "config: deepseek's shared expert size (", shared_expert_intermediate_size,
        ") must be a multiple of moe_intermediate_size (", moe_intermediate_size, ")");
  Check(router != RouterKind::kSparseMixer || num_experts_per_tok == 2,
        "config: sparsemixer routing (", ArchName(arch),
        ") is defined for num_experts_per_tok = 2 only, got ", num_experts_per_tok);
  Check(sliding_window >= 0, "config: sliding_window must be >= 0, got ", sliding_window);
  Check(layer_sliding.empty() || static_cast<int>(layer_sliding.size()) == num_layers,
        "config: layer_types has ", layer_sliding.size(), " entries for ", num_layers, " layers");
  Check(layer_sliding.empty() || sliding_window > 0,
        "config: sliding_attention layers need sliding_window > 0");
  Check(!layer_sliding.empty() == (arch == Arch::kGptOss),
        "config: per-layer sliding windows (layer_types) are implemented for gpt_oss only");
  Check(std::isfinite(swiglu_limit) && swiglu_limit >= 0,
        "config: swiglu_limit must be a finite number >= 0, got ", swiglu_limit);
  Check((swiglu_limit > 0) == (arch == Arch::kGptOss) &&
            attention_sinks == (arch == Arch::kGptOss) && router_bias == (arch == Arch::kGptOss),
        "config: expert biases with the clamped SwiGLU, attention sinks and a router bias "
        "are gpt_oss's (and all of them are)");
  Check(arch != Arch::kGptOss || router == RouterKind::kSoftmaxTopK,
        "config: gpt_oss routes by softmax over the top-k logits");
  if (longrope) {
    const size_t half = static_cast<size_t>(head_dim / 2);
    Check(longrope->short_factor.size() == half && longrope->long_factor.size() == half,
          "config: longrope short_factor and long_factor need head_dim / 2 = ", half,
          " entries, got ", longrope->short_factor.size(), " and ", longrope->long_factor.size());
    Check(longrope->original_max_position_embeddings > 0,
          "config: longrope original_max_position_embeddings must be > 0");
  }
  for (int e : eos_token_ids)
    Check(e >= 0 && e < vocab_size, "config: eos_token_id ", e, " outside the vocabulary");
  // Partial RoPE rotates pairs (i, i + rope_dim / 2) within the first rope_dim values.
  Check(rope_dim >= 0 && rope_dim <= head_dim && rope_dim % 2 == 0,
        "config: the rotary dimension (head_dim * partial_rotary_factor = ", rope_dim,
        ") must be even and in 2..head_dim (", head_dim, ")");
  Check(rope_dim == 0 || arch == Arch::kGlm4Moe || arch == Arch::kMiniMaxM2,
        "config: partial rotary is supported for glm4_moe and minimax_m2 only, not ",
        ArchName(arch));
  Check(!yarn || rope_dim == 0, "config: YaRN with partial rotary is not supported");
}

}  // namespace moex

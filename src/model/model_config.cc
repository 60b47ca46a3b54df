#include "model/model_config.h"

#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/arch/family.h"
#include "model/arch/hf_config_keys.h"

namespace moex {

namespace {

using hf_keys::OptionalBool;
using hf_keys::OptionalDouble;
using hf_keys::OptionalFloat;
using hf_keys::OptionalInt;
using hf_keys::RequireInt;

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
  if (type == "llama3") {
    Check(FamilyOf(c.arch).features().llama3_rope,
          "config.json: rope_scaling type 'llama3' is "
          "supported for ",
          FamiliesWith([](const Family::Features& f) { return f.llama3_rope; }), " only, not ",
          ArchName(c.arch));
    c.longrope = Llama3RopeFactors(c.head_dim, c.rope_theta, OptionalDouble(*rs, "factor", 8.0),
                                   OptionalDouble(*rs, "low_freq_factor", 1.0),
                                   OptionalDouble(*rs, "high_freq_factor", 4.0),
                                   OptionalInt(*rs, "original_max_position_embeddings", 8192));
    return;
  }
  if (type == "yarn") {
    const Family::Features& has = FamilyOf(c.arch).features();
    Check(has.Yarn(), "config.json: rope_scaling type 'yarn' is supported for ",
          FamiliesWith([](const Family::Features& f) { return f.Yarn(); }), " only, not ",
          ArchName(c.arch));
    c.yarn = has.generic_yarn ? ParseGenericYarn(*rs, c) : ParseYarn(*rs);
    return;
  }
  Check(type == "longrope" || type == "su", "config.json: rope_scaling type '", type,
        "' is not supported");
  Check(FamilyOf(c.arch).features().longrope, "config.json: rope_scaling type '", type,
        "' is supported for ", FamiliesWith([](const Family::Features& f) { return f.longrope; }),
        " only, not ", ArchName(c.arch));
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
  double fallback = OptionalDouble(*rs, "attention_factor", 0.0);
  if (fallback <= 0) fallback = LongRopeAttentionFactor(c.max_position_embeddings, original);
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
  return FamilyOf(arch).names().model_type;
}

Arch ParseArch(const std::string& name) {
  if (const Family* f = ParseArchOrNull(name)) return f->arch();
  Fail("unsupported architecture '", name,
       "' (supported: ", FamiliesWith([](const Family::Features&) { return true; }), ")");
}

ModelConfig ModelConfig::FromHfJson(const nlohmann::json& j) {
  Check(j.is_object(), "config.json: top level must be an object");
  auto mt = j.find("model_type");
  Check(mt != j.end() && !mt->is_null(), "config.json: missing 'model_type'");
  Check(mt->is_string(), "config.json: 'model_type' must be a string such as \"olmoe\", got ",
        mt->dump());
  ModelConfig c;
  c.arch = ParseArch(mt->get<std::string>());
  // A vision-language wrapper (Qwen3.5's and Llama 4's ...ForConditionalGeneration) keeps
  // the text model's keys in text_config; the vision tower's are not read. The top level's
  // tie_word_embeddings and token ids stand where text_config has none.
  const auto text_config = j.find("text_config");
  const nlohmann::json& t =
      text_config != j.end() && text_config->is_object() && !j.contains("hidden_size")
          ? *text_config
          : j;
  c.vocab_size = RequireInt(t, "vocab_size");
  c.hidden_size = RequireInt(t, "hidden_size");
  c.num_layers = RequireInt(t, "num_hidden_layers");
  c.num_heads = RequireInt(t, "num_attention_heads");
  c.num_kv_heads = OptionalInt(t, "num_key_value_heads", c.num_heads);
  c.head_dim = OptionalInt(t, "head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.rms_norm_eps = OptionalFloat(t, "rms_norm_eps", 1e-5f);
  c.rope_theta = OptionalFloat(t, "rope_theta", 10000.0f);
  c.max_position_embeddings = OptionalInt(t, "max_position_embeddings", 4096);
  c.tie_word_embeddings =
      OptionalBool(t, "tie_word_embeddings", OptionalBool(j, "tie_word_embeddings", false));
  c.bos_token_id = OptionalInt(t, "bos_token_id", OptionalInt(j, "bos_token_id", -1));
  const nlohmann::json* eos = nullptr;
  for (const nlohmann::json* o : {&t, &j})
    if (auto it = o->find("eos_token_id"); eos == nullptr && it != o->end() && !it->is_null())
      eos = &*it;
  if (eos != nullptr) {
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

  FamilyOf(c.arch).ReadHfConfig(t, c);
  ParseRopeScaling(t, c);
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
  const Family& family = FamilyOf(arch);
  j["architectures"].push_back(family.names().hf_class);
  family.WriteHfConfig(*this, j);
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
  const Family& family = FamilyOf(arch);
  const Family::Features& has = family.features();
  Check(!mla || IsDeepseekMla(), "config: MLA is defined for deepseek_v2 and deepseek_v3 only");
  if (yarn) {
    Check(has.Yarn(), "config: YaRN rope scaling is supported for ",
          FamiliesWith([](const Family::Features& f) { return f.Yarn(); }), " only");
    Check(yarn->truncate || has.generic_yarn,
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
  Check(!has.counted_shared_experts || shared_expert_intermediate_size % moe_intermediate_size == 0,
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
  const auto gpt_oss_blocks = [](const Family::Features& f) { return f.gpt_oss_blocks; };
  Check(!layer_sliding.empty() == has.gpt_oss_blocks,
        "config: per-layer sliding windows (layer_types) are implemented for ",
        FamiliesWith(gpt_oss_blocks), " only");
  Check(std::isfinite(swiglu_limit) && swiglu_limit >= 0,
        "config: swiglu_limit must be a finite number >= 0, got ", swiglu_limit);
  Check((swiglu_limit > 0) == has.gpt_oss_blocks && attention_sinks == has.gpt_oss_blocks &&
            router_bias == has.gpt_oss_blocks,
        "config: expert biases with the clamped SwiGLU, attention sinks and a router bias "
        "are ",
        FamiliesWith(gpt_oss_blocks), "'s (and all of them are)");
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
  Check(rope_dim == 0 || has.partial_rotary, "config: partial rotary is supported for ",
        FamiliesWith([](const Family::Features& f) { return f.partial_rotary; }), " only, not ",
        ArchName(arch));
  Check(!yarn || rope_dim == 0, "config: YaRN with partial rotary is not supported");
  const auto delta_net_family = [](const Family::Features& f) { return f.gated_delta_net; };
  Check((!delta_net && !attention_output_gate && norm_weight_offset == 0.0f) || has.gated_delta_net,
        "config: Gated DeltaNet layers, gated attention and zero-centred norms are implemented "
        "for ",
        FamiliesWith(delta_net_family), " only, not ", ArchName(arch));
  Check(norm_weight_offset == 0.0f || norm_weight_offset == 1.0f,
        "config: norm_weight_offset must be 0 or 1, got ", norm_weight_offset);
  Check(!delta_net == layer_linear.empty(),
        "config: Gated DeltaNet needs one layer type per layer, and layer types need it");
  if (delta_net) {
    const GatedDeltaNet& g = *delta_net;
    Check(static_cast<int>(layer_linear.size()) == num_layers, "config: layer_types has ",
          layer_linear.size(), " entries for ", num_layers, " layers");
    Check(g.num_k_heads > 0 && g.num_v_heads > 0 && g.k_head_dim > 0 && g.v_head_dim > 0,
          "config: linear_num_key_heads, linear_num_value_heads, linear_key_head_dim and "
          "linear_value_head_dim must be > 0 (got ",
          g.num_k_heads, ", ", g.num_v_heads, ", ", g.k_head_dim, ", ", g.v_head_dim, ")");
    Check(g.num_v_heads % g.num_k_heads == 0, "config: linear_num_value_heads (", g.num_v_heads,
          ") must be a multiple of linear_num_key_heads (", g.num_k_heads, ")");
    Check(g.conv_kernel >= 1 && g.conv_kernel <= 64,
          "config: linear_conv_kernel_dim must be in 1..64, got ", g.conv_kernel);
  }
  family.Validate(*this);
}

}  // namespace moex

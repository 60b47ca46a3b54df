#include "model/arch/hf_config_keys.h"

#include <cstdint>

#include "core/error.h"

namespace moex::hf_keys {

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

void CheckSilu(const nlohmann::json& j, const char* model_type) {
  if (auto act = j.find("hidden_act"); act != j.end() && !act->is_null()) {
    Check(act->is_string() && act->get<std::string>() == "silu", "config.json: ", model_type,
          " hidden_act must be \"silu\", got ", act->dump());
  }
}

int SharedExpertSize(const nlohmann::json& j, int fallback_count, int moe_intermediate_size) {
  const int shared = OptionalInt(j, "n_shared_experts", fallback_count);
  Check(shared >= 0 && shared <= 1024, "config.json: n_shared_experts must be in 0..1024, got ",
        shared);
  return shared * moe_intermediate_size;
}

void ReadDeepseekExperts(const nlohmann::json& j, ModelConfig& c) {
  c.num_experts = RequireInt(j, "n_routed_experts");
  c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
  c.moe_intermediate_size = RequireInt(j, "moe_intermediate_size");
  c.intermediate_size = RequireInt(j, "intermediate_size");
  c.first_k_dense_replace = OptionalInt(j, "first_k_dense_replace", 0);
  c.moe_layer_freq = OptionalInt(j, "moe_layer_freq", 1);
}

void WriteDeepseekExperts(const ModelConfig& c, nlohmann::json& j) {
  j["n_routed_experts"] = c.num_experts;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["intermediate_size"] = c.intermediate_size;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["moe_layer_freq"] = c.moe_layer_freq;
  j["n_shared_experts"] =
      c.moe_intermediate_size > 0 ? c.shared_expert_intermediate_size / c.moe_intermediate_size : 0;
  j["norm_topk_prob"] = c.norm_topk_prob;
}

nlohmann::json YarnJson(const std::optional<Yarn>& yarn, bool generic) {
  if (!yarn) return nullptr;
  nlohmann::json rs = {{"factor", yarn->factor},
                       {"original_max_position_embeddings", yarn->original_max_position_embeddings},
                       {"beta_fast", yarn->beta_fast},
                       {"beta_slow", yarn->beta_slow}};
  if (generic) {
    rs["rope_type"] = "yarn";
    rs["truncate"] = yarn->truncate;
  } else {
    rs["type"] = "yarn";
    rs["mscale"] = yarn->mscale;
    rs["mscale_all_dim"] = yarn->mscale_all_dim;
  }
  return rs;
}

}  // namespace moex::hf_keys

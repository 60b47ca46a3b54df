// Readers of config.json keys shared by every family's adapter (model/arch/*.cc) and
// ModelConfig::FromHfJson: each checks the key's type and range and names the key in its
// error, so every family reports a bad config.json the same way.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace moex::hf_keys {

// A required integer in 0..2^31-1.
int RequireInt(const nlohmann::json& j, const char* key);
// `fallback` when absent or null; otherwise an integer within int's range.
int OptionalInt(const nlohmann::json& j, const char* key, int fallback);
float OptionalFloat(const nlohmann::json& j, const char* key, float fallback);
double OptionalDouble(const nlohmann::json& j, const char* key, double fallback);
bool OptionalBool(const nlohmann::json& j, const char* key, bool fallback);
// hidden_act, when given, must be "silu" (the only activation the experts compute).
void CheckSilu(const nlohmann::json& j, const char* model_type);
// n_shared_experts (0..1024) times the routed expert size.
int SharedExpertSize(const nlohmann::json& j, int fallback_count, int moe_intermediate_size);

// The expert-layout keys every DeepSeek-style config (deepseek, deepseek_v2/v3, glm4_moe)
// spells the same way; the writer sets n_shared_experts from the shared expert size.
void ReadDeepseekExperts(const nlohmann::json& j, ModelConfig& c);
void WriteDeepseekExperts(const ModelConfig& c, nlohmann::json& j);

// rope_scaling for `yarn` (null when unset): DeepSeek's keys, or HF's generic ones
// (rope_type, truncate) when `generic`.
nlohmann::json YarnJson(const std::optional<Yarn>& yarn, bool generic);

}  // namespace moex::hf_keys

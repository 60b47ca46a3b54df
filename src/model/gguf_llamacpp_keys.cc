#include "model/gguf_llamacpp_keys.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "model/arch/family.h"
#include "model/gguf_arch_keys.h"

namespace moex::llamacpp_keys {

namespace {

using namespace std::string_view_literals;

// llama_model_base::load_hparams: read for every architecture.
constexpr auto kEveryArch = std::to_array<std::string_view>({
    "context_length",
    "embedding_length",
    "embedding_length_out",
    "attention.causal",
    "pooling_type",
    "block_count",
    "nextn_predict_layers",
    "expert_count",
    "expert_used_count",
    "expert_group_count",
    "expert_group_used_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "rope.scaling.finetuned",
    "rope.scaling.original_context_length",
    "rope.freq_base",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scale_linear",
    "rope.scaling.attn_factor",
    "rope.scaling.alpha",
    "attention.key_length",
    "attention.value_length",
    "rope.dimension_count",
    "attention.key_length_swa",
    "attention.value_length_swa",
    "rope.dimension_count_swa",
    "classifier.output_labels",
});

// llama_hparams' defaults other than zero, false or empty, as its writer stores them.
struct Default {
  std::string_view key;
  double value;  // Every element, for arrays.
};
constexpr Default kDefaults[] = {
    {"attention.causal", 1},
    {"pooling_type", 4294967295.0},  // LLAMA_POOLING_TYPE_UNSPECIFIED (-1) as u32.
    {"expert_group_scale", 0.05f},
    {"attn_logit_softcapping", 50},
    {"router_logit_softcapping", 30},
    {"final_logit_softcapping", 30},
    {"token_shift_count", 2},
    {"attention.rope_pattern", 1},
    {"activation.situ_beta", 1},
    {"decoder_start_token_id", -1},
    {"deepstack_mapping", -1},
    {"kda.gate_lower_bound", -std::numeric_limits<double>::infinity()},
    {"rope.scaling.attn_factor", 1},
    {"rope.scaling.yarn_ext_factor", -1},
    {"rope.scaling.yarn_attn_factor", 1},
    {"rope.scaling.yarn_beta_fast", 32},
    {"rope.scaling.yarn_beta_slow", 1},
};

// Keys whose default is another key's value (llama.cpp copies it when the key is absent).
struct Alias {
  std::string_view key;
  std::string_view same_as;
};
constexpr Alias kAliases[] = {
    {"rope.dimension_count", "attention.key_length"},
    {"attention.key_length_swa", "attention.key_length"},
    {"attention.value_length_swa", "attention.value_length"},
    {"rope.dimension_count_swa", "rope.dimension_count"},
    {"rope.freq_base_swa", "rope.freq_base"},
    {"rope.scaling.original_context_length", "context_length"},
};

// Every element of a numeric (or bool) value equals `x`; an empty array qualifies.
bool AllEqual(const GgufValue& v, double x) {
  if (v.is_array()) {
    if (v.array_type() == GgufType::kString || v.array_type() == GgufType::kArray)
      return v.array_size() == 0;
    const std::vector<float> values = v.AsFloatArray();
    return std::all_of(values.begin(), values.end(),
                       [&](float e) { return static_cast<double>(e) == x; });
  }
  if (v.type() == GgufType::kString) return false;
  if (v.type() == GgufType::kBool) return (v.AsBool() ? 1.0 : 0.0) == x;
  // f32 defaults compare in f32 (0.05f is not 0.05).
  if (v.type() == GgufType::kF32) return static_cast<float>(v.AsFloat()) == static_cast<float>(x);
  return v.AsFloat() == x;
}

// The value of a scalar numeric key, or when absent the value of the key it defaults to.
std::optional<double> ScalarOrAlias(const GgufFile& f, const std::string& arch,
                                    std::string_view key) {
  const GgufValue* v = f.Find(gguf_keys::Key(arch.c_str(), std::string(key).c_str()));
  if (v != nullptr) {
    if (v->is_array() || v->type() == GgufType::kString) return std::nullopt;
    return v->type() == GgufType::kBool ? (v->AsBool() ? 1.0 : 0.0) : v->AsFloat();
  }
  for (const Alias& alias : kAliases)
    if (alias.key == key) return ScalarOrAlias(f, arch, alias.same_as);
  return std::nullopt;
}

}  // namespace

bool Reads(std::string_view arch, std::string_view key) {
  if (std::find(kEveryArch.begin(), kEveryArch.end(), key) != kEveryArch.end()) return true;
  const Family* family = FindGgufFamily(arch);
  if (family == nullptr) return true;  // Not a family moex knows: assume it reads everything.
  const std::vector<std::string_view> keys = family->LlamaCppArchKeys();
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

bool RopeScalingIsNone(const GgufFile& f, std::string_view arch) {
  const std::string a(arch);
  const std::string type = f.GetString(gguf_keys::Key(a.c_str(), "rope.scaling.type"), "linear");
  if (type == "none") return true;
  if (type != "linear") return false;
  const double factor = f.GetFloat(gguf_keys::Key(a.c_str(), "rope.scaling.factor"), 0.0);
  return factor == 0.0 || factor == 1.0;
}

bool IsDefault(const GgufFile& f, std::string_view arch, std::string_view key) {
  const std::string a(arch);
  const GgufValue& v = f.Get(gguf_keys::Key(a.c_str(), std::string(key).c_str()));
  if (key == "rope.scaling.type"sv || key == "rope.scaling.factor"sv)
    return RopeScalingIsNone(f, arch);
  // Only YaRN reads the original context (llama.cpp's ext_factor is 0 otherwise).
  if (key == "rope.scaling.original_context_length"sv && RopeScalingIsNone(f, arch)) return true;
  if (key == "rope.scaling.finetuned"sv) return true;  // Describes the file; never computed with.
  for (const Alias& alias : kAliases) {
    if (alias.key != key) continue;
    const std::optional<double> other = ScalarOrAlias(f, a, alias.same_as);
    return other.has_value() && AllEqual(v, *other);
  }
  for (const Default& d : kDefaults)
    if (d.key == key) return AllEqual(v, d.value);
  return AllEqual(v, 0.0);
}

}  // namespace moex::llamacpp_keys

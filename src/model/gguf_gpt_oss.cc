#include "model/gguf_gpt_oss.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "model/gguf_arch_keys.h"
#include "model/gguf_llamacpp_keys.h"

namespace moex::gguf_gpt_oss {

namespace {

// llama.cpp's graph constant for gpt-oss's activation limit.
constexpr float kLlamaCppSwigluLimit = 7.0f;

constexpr gguf_keys::ArchKeys kKeys{kArch};

}  // namespace

void ReadConfig(const GgufFile& f, ModelConfig& c) {
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
    Check(sliding == c.layer_sliding, f.path(), ": ", kKeys.Key("attention.sliding_window_pattern"),
          " = ", pattern->ToString(),
          ": gpt-oss layers other than alternating sliding/full (from sliding) are not supported");
  }
  c.swiglu_limit = static_cast<float>(f.GetFloat(kKeys.Key("swiglu_limit"), kLlamaCppSwigluLimit));
  const std::string rope_type = f.GetString(kKeys.Key("rope.scaling.type"), "none");
  Check(rope_type == "yarn" || llamacpp_keys::RopeScalingIsNone(f, kKeys.arch), f.path(), ": ",
        kKeys.Key("rope.scaling.type"), " '", rope_type,
        "' is not supported for gpt-oss (yarn, none, or linear with factor 0 or 1)");
  if (rope_type != "yarn") return;
  Yarn y;
  y.factor = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.factor")));
  y.original_max_position_embeddings = kKeys.PositiveInt(f, "rope.scaling.original_context_length");
  y.beta_fast = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.yarn_beta_fast"), 32.0));
  y.beta_slow = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.yarn_beta_slow"), 1.0));
  y.truncate = f.GetBool(kKeys.Key("rope.scaling.yarn_truncate"), false);
  c.yarn = y;
}

void WriteConfig(const ModelConfig& c, GgufWriter& w) {
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

}  // namespace moex::gguf_gpt_oss

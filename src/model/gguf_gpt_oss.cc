#include "model/gguf_gpt_oss.h"

#include <string>

#include "core/error.h"

namespace moex::gguf_gpt_oss {

namespace {

// llama.cpp's graph constant for gpt-oss's activation limit.
constexpr float kLlamaCppSwigluLimit = 7.0f;

std::string Key(const char* key) {
  return std::string(kArch) + "." + key;
}

int PositiveInt(const GgufFile& f, const char* key) {
  Check(f.Find(Key(key)) != nullptr, f.path(), ": gpt-oss GGUF without '", Key(key), "'");
  const int64_t v = f.GetInt(Key(key));
  Check(v > 0 && v < (1ll << 31), f.path(), ": ", Key(key), " = ", v, " is out of range");
  return static_cast<int>(v);
}

}  // namespace

void ReadConfig(const GgufFile& f, ModelConfig& c) {
  c.norm_topk_prob = true;
  c.router_bias = true;
  c.attention_sinks = true;
  c.attention_out_bias = c.attention_bias;
  c.sliding_window = PositiveInt(f, "attention.sliding_window");
  c.layer_sliding = AlternatingSlidingLayers(c.num_layers);
  c.swiglu_limit =
      static_cast<float>(f.GetFloat(Key("swiglu_limit"), kLlamaCppSwigluLimit));
  const std::string rope_type = f.GetString(Key("rope.scaling.type"), "none");
  Check(rope_type == "yarn" || rope_type == "none", f.path(), ": ", Key("rope.scaling.type"),
        " '", rope_type, "' is not supported for gpt-oss (yarn or none)");
  if (rope_type != "yarn") return;
  Yarn y;
  y.factor = static_cast<float>(f.GetFloat(Key("rope.scaling.factor")));
  y.original_max_position_embeddings = PositiveInt(f, "rope.scaling.original_context_length");
  y.beta_fast = static_cast<float>(f.GetFloat(Key("rope.scaling.yarn_beta_fast"), 32.0));
  y.beta_slow = static_cast<float>(f.GetFloat(Key("rope.scaling.yarn_beta_slow"), 1.0));
  y.truncate = f.GetBool(Key("rope.scaling.yarn_truncate"), false);
  c.yarn = y;
}

void WriteConfig(const ModelConfig& c, GgufWriter& w) {
  Check(c.layer_sliding == AlternatingSlidingLayers(c.num_layers),
        "gguf: gpt-oss layer_types other than alternating sliding/full (from sliding) have no "
        "llama.cpp key");
  w.Set(Key("attention.sliding_window"), GgufValue::U32(static_cast<uint32_t>(c.sliding_window)));
  if (c.swiglu_limit != kLlamaCppSwigluLimit)
    w.Set(Key("swiglu_limit"), GgufValue::F32(c.swiglu_limit));
  if (!c.yarn) return;
  const Yarn& y = *c.yarn;
  w.Set(Key("rope.scaling.type"), GgufValue::String("yarn"));
  w.Set(Key("rope.scaling.factor"), GgufValue::F32(y.factor));
  w.Set(Key("rope.scaling.original_context_length"),
        GgufValue::U32(static_cast<uint32_t>(y.original_max_position_embeddings)));
  w.Set(Key("rope.scaling.yarn_beta_fast"), GgufValue::F32(y.beta_fast));
  w.Set(Key("rope.scaling.yarn_beta_slow"), GgufValue::F32(y.beta_slow));
  if (y.truncate) w.Set(Key("rope.scaling.yarn_truncate"), GgufValue::Bool(true));
}

}  // namespace moex::gguf_gpt_oss

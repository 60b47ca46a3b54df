#include "model/gguf_glm4moe.h"

#include <string>

#include "core/error.h"

namespace moex::gguf_glm4moe {

namespace {

constexpr const char* kArch = "glm4moe";

std::string Key(const char* key) {
  return std::string(kArch) + "." + key;
}

int IntKey(const GgufFile& f, const char* key, int64_t fallback) {
  const int64_t v = f.GetInt(Key(key), fallback);
  Check(v >= 0 && v < (1ll << 31), f.path(), ": GGUF key '", Key(key), "' out of range: ", v);
  return static_cast<int>(v);
}

}  // namespace

void ReadConfig(const GgufFile& f, ModelConfig& c) {
  const int nextn = IntKey(f, "nextn_predict_layers", 0);
  Check(nextn < c.num_layers, f.path(), ": ", Key("nextn_predict_layers"), " (", nextn,
        ") leaves no layers of block_count ", c.num_layers);
  c.num_layers -= nextn;  // llama.cpp runs block_count - nextn_predict_layers blocks.
  c.num_nextn_predict_layers = nextn;
  c.rope_dim = IntKey(f, "rope.dimension_count", c.head_dim);
  c.intermediate_size = IntKey(f, "feed_forward_length", 0);
  c.first_k_dense_replace = IntKey(f, "leading_dense_block_count", 0);
  c.shared_expert_intermediate_size =
      IntKey(f, "expert_shared_count", 0) * c.moe_intermediate_size;
  const int gating = IntKey(f, "expert_gating_func", 2);
  Check(gating == 2, f.path(), ": ", Key("expert_gating_func"), " ", gating,
        " is not supported for glm4moe (2, sigmoid)");
  c.router = RouterKind::kGroupedTopK;
  c.scoring_func = ScoringFunc::kSigmoid;
  c.topk_method = TopKMethod::kNoauxTc;
  c.scale_normalised_weights = true;
  c.routed_scaling_factor = static_cast<float>(f.GetFloat(Key("expert_weights_scale"), 1.0));
  c.n_group = IntKey(f, "expert_group_count", 1);
  c.topk_group = IntKey(f, "expert_group_used_count", c.n_group);
  c.qk_norm = f.FindTensorInfo("blk.0.attn_q_norm.weight") != nullptr;
  c.qk_norm_per_head = c.qk_norm;
}

void WriteConfig(const ModelConfig& c, GgufWriter& w) {
  auto u32 = [&](const char* key, int v) { w.Set(Key(key), GgufValue::U32(v)); };
  u32("block_count", c.num_layers);  // MTP layers are not written.
  u32("rope.dimension_count", c.RotaryDim());
  u32("leading_dense_block_count", c.first_k_dense_replace);
  u32("expert_shared_count", c.shared_expert_intermediate_size / c.moe_intermediate_size);
  w.Set(Key("expert_weights_scale"), GgufValue::F32(c.routed_scaling_factor));
  u32("expert_gating_func", 2);
  if (c.n_group > 1) {
    u32("expert_group_count", c.n_group);
    u32("expert_group_used_count", c.topk_group);
  }
}

}  // namespace moex::gguf_glm4moe

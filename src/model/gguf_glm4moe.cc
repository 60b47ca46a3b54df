#include "model/gguf_glm4moe.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/gguf_arch_keys.h"

namespace moex::gguf_glm4moe {

namespace {

constexpr gguf_keys::ArchKeys kKeys{"glm4moe"};

}  // namespace

void ReadConfig(const GgufFile& f, ModelConfig& c) {
  const int nextn = kKeys.Int(f, "nextn_predict_layers", 0);
  Check(nextn < c.num_layers, f.path(), ": ", kKeys.Key("nextn_predict_layers"), " (", nextn,
        ") leaves no layers of block_count ", c.num_layers);
  c.num_layers -= nextn;  // llama.cpp runs block_count - nextn_predict_layers blocks.
  c.num_nextn_predict_layers = nextn;
  c.rope_dim = kKeys.Int(f, "rope.dimension_count", c.head_dim);
  c.intermediate_size = kKeys.Int(f, "feed_forward_length", 0);
  c.first_k_dense_replace = kKeys.Int(f, "leading_dense_block_count", 0);
  c.shared_expert_intermediate_size =
      kKeys.Int(f, "expert_shared_count", 0) * c.moe_intermediate_size;
  const int gating = kKeys.Int(f, "expert_gating_func", 2);
  Check(gating == 2, f.path(), ": ", kKeys.Key("expert_gating_func"), " ", gating,
        " is not supported for glm4moe (2, sigmoid)");
  c.router = RouterKind::kGroupedTopK;
  c.scoring_func = ScoringFunc::kSigmoid;
  c.topk_method = TopKMethod::kNoauxTc;
  c.scale_normalised_weights = true;
  // llama.cpp scales the routing weights unless the scale is 0 (its default) or 1.
  const double scale = f.GetFloat(kKeys.Key("expert_weights_scale"), 1.0);
  c.routed_scaling_factor = scale == 0.0 ? 1.0f : static_cast<float>(scale);
  // 0 (llama.cpp's default) is one group.
  c.n_group = std::max(1, kKeys.Int(f, "expert_group_count", 1));
  c.topk_group = std::max(1, kKeys.Int(f, "expert_group_used_count", c.n_group));
  c.norm_topk_prob = f.GetBool(kKeys.Key("expert_weights_norm"), false);
  // llama.cpp computes M-RoPE when these are set, but it gives a text token the same
  // position in every section, which makes M-RoPE the NeoX RoPE moex computes.
  f.Find(kKeys.Key("rope.dimension_sections"));
  c.qk_norm = f.FindTensorInfo("blk.0.attn_q_norm.weight") != nullptr;
  c.qk_norm_per_head = c.qk_norm;
}

void WriteConfig(const ModelConfig& c, GgufWriter& w) {
  auto u32 = [&](const char* key, int v) { kKeys.SetU32(w, key, static_cast<uint32_t>(v)); };
  u32("block_count", c.num_layers);  // MTP layers are not written.
  u32("rope.dimension_count", c.RotaryDim());
  u32("leading_dense_block_count", c.first_k_dense_replace);
  u32("expert_shared_count", c.shared_expert_intermediate_size / c.moe_intermediate_size);
  kKeys.SetF32(w, "expert_weights_scale", c.routed_scaling_factor);
  u32("expert_gating_func", 2);
  if (c.n_group > 1) {
    u32("expert_group_count", c.n_group);
    u32("expert_group_used_count", c.topk_group);
  }
}

}  // namespace moex::gguf_glm4moe

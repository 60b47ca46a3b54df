#include "model/gguf_deepseek2.h"

#include <cstring>

#include "core/error.h"
#include "model/gguf_arch_keys.h"
#include "model/gguf_llamacpp_keys.h"

namespace moex::gguf_deepseek2 {

namespace {

constexpr gguf_keys::ArchKeys kKeys{"deepseek2"};

// Element `i` of `values` stored as `dtype` (f32, f16 or bf16) at `out`.
void Store(float value, DType dtype, std::byte* out) {
  if (dtype == DType::kF32) {
    std::memcpy(out, &value, 4);
  } else {
    const uint16_t h = dtype == DType::kBF16 ? F32ToBF16(value) : F32ToF16(value);
    std::memcpy(out, &h, 2);
  }
}

// A fill over `numel` elements whose element i is `at(i)`, converted to `dtype`.
ByteFill ElementFill(DType dtype, std::function<float(int64_t)> at) {
  return [dtype, at](size_t offset, std::span<std::byte> out) {
    const size_t elem = DTypeBytes(dtype, 1);
    const int64_t first = static_cast<int64_t>(offset / elem);
    const int64_t n = static_cast<int64_t>(out.size() / elem);
    for (int64_t i = 0; i < n; ++i) Store(at(first + i), dtype, out.data() + i * elem);
  };
}

}  // namespace

void ReadConfig(const GgufFile& f, ModelConfig& c) {
  const int nextn = kKeys.Int(f, "nextn_predict_layers", 0);
  Check(nextn < c.num_layers, f.path(), ": ", kKeys.Key("nextn_predict_layers"), " (", nextn,
        ") leaves no layers of block_count ", c.num_layers);
  c.num_layers -= nextn;  // llama.cpp's n_layer(): MTP blocks come last.
  c.num_nextn_predict_layers = nextn;
  c.num_kv_heads = c.num_heads;  // head_count_kv is 1: MLA seen as multi-query attention.

  Mla m;
  m.q_lora_rank = kKeys.Int(f, "attention.q_lora_rank", 0);
  m.kv_lora_rank = kKeys.RequiredInt(f, "attention.kv_lora_rank");
  m.qk_rope_head_dim = kKeys.RequiredInt(f, "rope.dimension_count");
  int qk = 0;
  if (kKeys.Has(f, "attention.key_length_mla")) {
    qk = kKeys.Int(f, "attention.key_length_mla", 0);
    m.v_head_dim = kKeys.RequiredInt(f, "attention.value_length_mla");
    // This layout's key_length / value_length describe MLA as multi-query attention over
    // the latent (llama.cpp's meaning): they must say so.
    const int key = kKeys.Int(f, "attention.key_length", m.kv_lora_rank + m.qk_rope_head_dim);
    const int value = kKeys.Int(f, "attention.value_length", m.kv_lora_rank);
    Check(key == m.kv_lora_rank + m.qk_rope_head_dim && value == m.kv_lora_rank, f.path(), ": ",
          kKeys.Key("attention.key_length"), " ", key, " / ", kKeys.Key("attention.value_length"),
          " ", value, " should be kv_lora_rank + rope.dimension_count (",
          m.kv_lora_rank + m.qk_rope_head_dim, ") / kv_lora_rank (", m.kv_lora_rank,
          ") beside key_length_mla");
  } else {  // Older files: the decompressed head sizes in key_length / value_length.
    qk = kKeys.RequiredInt(f, "attention.key_length");
    m.v_head_dim = kKeys.RequiredInt(f, "attention.value_length");
  }
  m.qk_nope_head_dim = qk - m.qk_rope_head_dim;
  Check(m.qk_nope_head_dim > 0, f.path(), ": deepseek2 key length ", qk,
        " leaves no room for qk_nope beside rope.dimension_count ", m.qk_rope_head_dim);
  c.mla = m;
  c.head_dim = m.qk_rope_head_dim;

  c.intermediate_size = kKeys.Int(f, "feed_forward_length", 0);
  c.first_k_dense_replace = kKeys.Int(f, "leading_dense_block_count", 0);
  c.shared_expert_intermediate_size =
      kKeys.Int(f, "expert_shared_count", 0) * c.moe_intermediate_size;
  c.norm_topk_prob = f.GetBool(kKeys.Key("expert_weights_norm"), false);
  const int gating = kKeys.Int(f, "expert_gating_func", 1);
  Check(gating == 1 || gating == 2, f.path(), ": ", kKeys.Key("expert_gating_func"), " ", gating,
        " is not supported (1 softmax, 2 sigmoid)");
  c.router = RouterKind::kGroupedTopK;
  c.scoring_func = gating == 2 ? ScoringFunc::kSigmoid : ScoringFunc::kSoftmax;
  c.n_group = std::max(1, kKeys.Int(f, "expert_group_count", 1));
  c.topk_group = std::max(1, kKeys.Int(f, "expert_group_used_count", c.n_group));
  bool bias = false;
  for (int l = 0; l < c.num_layers && !bias; ++l)
    bias =
        f.FindTensorInfo("blk." + std::to_string(l) + "." + kGgufRouterBias + ".bias") != nullptr;
  if (bias || c.scoring_func == ScoringFunc::kSigmoid) {
    c.arch = Arch::kDeepseekV3;
    c.topk_method = TopKMethod::kNoauxTc;
  } else {
    c.arch = Arch::kDeepseekV2;
    c.topk_method = c.n_group > 1 ? TopKMethod::kGroupLimitedGreedy : TopKMethod::kGreedy;
  }
  c.scale_normalised_weights = c.arch == Arch::kDeepseekV3;

  const std::string rope_type = f.GetString(kKeys.Key("rope.scaling.type"), "none");
  if (rope_type == "yarn") {
    Yarn y;
    y.factor = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.factor")));
    y.original_max_position_embeddings =
        kKeys.RequiredInt(f, "rope.scaling.original_context_length");
    y.beta_fast = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.yarn_beta_fast"), 32.0));
    y.beta_slow = static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.yarn_beta_slow"), 1.0));
    // Written by llama.cpp's converter as 0.1 * mscale_all_dim.
    y.mscale_all_dim =
        static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.yarn_log_multiplier"), 0.0) / 0.1);
    y.mscale =
        static_cast<float>(f.GetFloat(kKeys.Key("rope.scaling.yarn_mscale"), y.mscale_all_dim));
    c.yarn = y;
  } else {
    // Without YaRN llama.cpp's frequency scale is 1 ("linear", its default, with factor 0
    // or 1 scales nothing), which makes the YaRN keys neutral.
    Check(llamacpp_keys::RopeScalingIsNone(f, kKeys.arch), f.path(), ": ",
          kKeys.Key("rope.scaling.type"), " '", rope_type, "' with ",
          kKeys.Key("rope.scaling.factor"), " ", f.GetFloat(kKeys.Key("rope.scaling.factor"), 0.0),
          " is not supported for deepseek2 (none, yarn, or linear with factor 0 or 1)");
    for (const char* key : {"rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_beta_fast",
                            "rope.scaling.yarn_beta_slow", "rope.scaling.original_context_length"})
      f.Find(kKeys.Key(key));
  }
}

std::vector<float> JoinKvB(const TensorView& k_b, const TensorView& v_b, const ModelConfig& c) {
  const Mla& m = *c.mla;
  const int64_t H = c.num_heads, nope = m.qk_nope_head_dim, v_dim = m.v_head_dim;
  const int64_t lat = m.kv_lora_rank;
  Check(k_b.shape == std::vector<int64_t>{H, lat, nope}, k_b.name, " has shape ",
        ShapeString(k_b.shape), ", expected [", H, ", ", lat, ", ", nope, "]");
  Check(v_b.shape == std::vector<int64_t>{H, v_dim, lat}, v_b.name, " has shape ",
        ShapeString(v_b.shape), ", expected [", H, ", ", v_dim, ", ", lat, "]");
  const std::vector<float> k = TensorToF32(k_b), v = TensorToF32(v_b);
  std::vector<float> kv(static_cast<size_t>(H * (nope + v_dim) * lat));
  for (int64_t h = 0; h < H; ++h) {
    float* head = &kv[static_cast<size_t>(h * (nope + v_dim) * lat)];
    for (int64_t j = 0; j < nope; ++j)
      for (int64_t l = 0; l < lat; ++l)
        head[j * lat + l] = k[static_cast<size_t>((h * lat + l) * nope + j)];
    std::memcpy(head + nope * lat, &v[static_cast<size_t>(h * v_dim * lat)],
                sizeof(float) * static_cast<size_t>(v_dim * lat));
  }
  return kv;
}

void WriteConfig(const ModelConfig& c, GgufWriter& w) {
  const Mla& m = *c.mla;
  auto u32 = [&](const char* key, int v) { kKeys.SetU32(w, key, static_cast<uint32_t>(v)); };
  auto f32 = [&](const char* key, float v) { kKeys.SetF32(w, key, v); };
  u32("block_count", c.num_layers);  // MTP layers are not written.
  u32("attention.head_count_kv", 1);
  // Written as 0 for a plain q_proj too: llama.cpp requires the key unless it recognises
  // a "lite" model by its layer count (27, 26 or 48), and reads 0 as "no q_lora".
  u32("attention.q_lora_rank", m.q_lora_rank);
  u32("attention.kv_lora_rank", m.kv_lora_rank);
  u32("attention.key_length", m.cache_row());
  u32("attention.value_length", m.kv_lora_rank);
  u32("attention.key_length_mla", m.qk_head_dim());
  u32("attention.value_length_mla", m.v_head_dim);
  u32("rope.dimension_count", m.qk_rope_head_dim);
  u32("leading_dense_block_count", c.first_k_dense_replace);
  u32("expert_shared_count", c.shared_expert_intermediate_size / c.moe_intermediate_size);
  f32("expert_weights_scale", c.routed_scaling_factor);
  w.Set(kKeys.Key("expert_weights_norm"), GgufValue::Bool(c.norm_topk_prob));
  u32("expert_gating_func", c.scoring_func == ScoringFunc::kSigmoid ? 2 : 1);
  if (c.topk_method != TopKMethod::kGreedy) {
    u32("expert_group_count", c.n_group);
    u32("expert_group_used_count", c.topk_group);
  }
  if (c.yarn) {
    const Yarn& y = *c.yarn;
    w.Set(kKeys.Key("rope.scaling.type"), GgufValue::String("yarn"));
    f32("rope.scaling.factor", y.factor);
    u32("rope.scaling.original_context_length", y.original_max_position_embeddings);
    f32("rope.scaling.yarn_log_multiplier", 0.1f * y.mscale_all_dim);
    f32("rope.scaling.yarn_beta_fast", y.beta_fast);
    f32("rope.scaling.yarn_beta_slow", y.beta_slow);
    if (y.mscale != y.mscale_all_dim) f32("rope.scaling.yarn_mscale", y.mscale);
  }
}

SplitTensor KBFromKvB(const TensorView& kv_b, const ModelConfig& c, DType dtype) {
  const Mla& m = *c.mla;
  const int64_t nope = m.qk_nope_head_dim, lat = m.kv_lora_rank, per = nope + m.v_head_dim;
  auto values = std::make_shared<std::vector<float>>(TensorToF32(kv_b));
  // Element (h, l, j) of k_b is kv_b[h * per + j][l].
  return {{c.num_heads, lat, nope}, ElementFill(dtype, [=](int64_t i) {
            const int64_t j = i % nope, l = (i / nope) % lat, h = i / (nope * lat);
            return (*values)[static_cast<size_t>((h * per + j) * lat + l)];
          })};
}

SplitTensor VBFromKvB(const TensorView& kv_b, const ModelConfig& c, DType dtype) {
  const Mla& m = *c.mla;
  const int64_t nope = m.qk_nope_head_dim, lat = m.kv_lora_rank, v_dim = m.v_head_dim;
  const int64_t per = nope + v_dim;
  auto values = std::make_shared<std::vector<float>>(TensorToF32(kv_b));
  // Element (h, i, l) of v_b is kv_b[h * per + nope + i][l].
  return {{c.num_heads, v_dim, lat}, ElementFill(dtype, [=](int64_t e) {
            const int64_t l = e % lat, i = (e / lat) % v_dim, h = e / (lat * v_dim);
            return (*values)[static_cast<size_t>((h * per + nope + i) * lat + l)];
          })};
}

}  // namespace moex::gguf_deepseek2

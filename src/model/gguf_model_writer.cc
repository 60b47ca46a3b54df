#include "model/gguf_model.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "io/gguf_writer.h"
#include "model/arch/family.h"
#include "model/gguf_arch_keys.h"
#include "model/gguf_deepseek2.h"
#include "model/gguf_gpt_oss.h"
#include "model/gguf_tensor_map.h"
#include "model/tensor_names.h"

namespace moex {

using gguf_keys::Key;
using gguf_map::ArchNames;
using gguf_map::HfExpertName;
using gguf_map::IsSuffix;
using gguf_map::kExpsStems;
using gguf_map::kGlobalNames;
using gguf_map::kLegacyExpertStems;
using gguf_map::LayerPrefix;
using gguf_map::MakeRowCopy;
using gguf_map::NamePair;
using gguf_map::NamesFor;
using gguf_map::ParseIndex;
using gguf_map::RowCopy;
using gguf_map::Split;

namespace {

constexpr int32_t kTokenTypeUnused = 5;  // llama.cpp's LLAMA_TOKEN_TYPE_UNUSED.

// One value per token: trims trailing [PAD] tokens or appends filler to `vocab` entries.
GgufValue ResizeTokenArray(const std::string& key, const GgufValue& v, size_t vocab,
                           const std::string& path) {
  const size_t n = v.array_size();
  if (v.array_type() == GgufType::kString) {
    std::vector<std::string> tokens = v.AsStringArray();
    for (size_t i = vocab; i < n; ++i) {
      Check(tokens[i].rfind("[PAD", 0) == 0, path, ": the tokenizer has ", n,
            " tokens but the model only ", vocab, "; token ", i, " ('", tokens[i],
            "') is not padding and cannot be dropped");
    }
    tokens.resize(vocab);
    for (size_t i = n; i < vocab; ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
    return GgufValue::StringArray(std::move(tokens));
  }
  const size_t size = GgufScalarBytes(v.array_type());
  std::vector<uint8_t> bytes(v.raw_array().begin(), v.raw_array().end());
  bytes.resize(vocab * size);
  if (vocab > n) {
    uint32_t filler;
    if (v.array_type() == GgufType::kF32) {
      const float score = -1000.0f;
      std::memcpy(&filler, &score, 4);
    } else {
      Check(v.array_type() == GgufType::kI32, path, ": ", key, " has unexpected element type ",
            GgufTypeName(v.array_type()));
      filler = static_cast<uint32_t>(kTokenTypeUnused);
    }
    for (size_t i = n; i < vocab; ++i)
      for (size_t b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<uint8_t>(filler >> (8 * b));
  }
  return GgufValue::NumericArray(v.array_type(), vocab, std::move(bytes));
}

// A token id value, or -1 for values of other types (copied unchanged).
int64_t TokenId(const GgufValue& v) {
  if (v.is_array() || v.type() == GgufType::kString || v.type() == GgufType::kBool ||
      v.type() == GgufType::kF32 || v.type() == GgufType::kF64) {
    return -1;
  }
  if (v.type() == GgufType::kU64 && v.scalar_bits() > (1ull << 62)) return INT64_MAX;
  return v.AsInt();
}

void CopyTokenizer(const GgufFile* tok, const ModelConfig& config, GgufWriter& w) {
  const auto vocab = static_cast<size_t>(config.vocab_size);
  if (tok == nullptr) {
    w.Set("tokenizer.ggml.model", GgufValue::String("no_vocab"));
  } else {
    const GgufValue* tokens = tok->Find("tokenizer.ggml.tokens");
    Check(tokens != nullptr, tok->path(), ": no tokenizer.ggml.tokens to copy");
    const uint64_t n = tokens->array_size();
    for (const auto& [key, value] : tok->metadata()) {
      if (key.rfind("tokenizer.", 0) != 0) continue;
      if (value.is_array() && value.array_size() == n &&
          (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.scores" ||
           key == "tokenizer.ggml.token_type")) {
        w.Set(key, ResizeTokenArray(key, value, vocab, tok->path()));
      } else if (key.ends_with("_token_id") && TokenId(value) >= config.vocab_size) {
        Log(LogLevel::kWarn, "dropping ", key, " (outside the model's vocabulary of ", vocab, ")");
      } else {
        w.Set(key, value);
      }
    }
    // A BPE vocabulary without a pre-tokenizer name (llama.cpp's older vocab files) is split
    // with GPT-2's byte-level regex, as HF's tokenizers do; llama.cpp would fall back to its
    // own 'default' splitting and count other tokens (docs/serving.md), so the name is set.
    const GgufValue* model = tok->Find("tokenizer.ggml.model");
    if (model != nullptr && model->type() == GgufType::kString && model->AsString() == "gpt2" &&
        tok->Find("tokenizer.ggml.pre") == nullptr)
      w.Set("tokenizer.ggml.pre", GgufValue::String("gpt-2"));
  }
  // The engine stops on config's ids, so llama.cpp must too.
  if (config.bos_token_id >= 0)
    w.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(config.bos_token_id));
  if (!config.eos_token_ids.empty())
    w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(config.eos_token_ids[0]));
  if (config.eos_token_ids.size() > 1)
    w.Set("tokenizer.ggml.eot_token_id", GgufValue::U32(config.eos_token_ids[1]));
  if (config.eos_token_ids.size() > 2)
    w.Set("tokenizer.ggml.eom_token_id", GgufValue::U32(config.eos_token_ids[2]));
}

void SetArchMetadata(const ModelConfig& c, GgufWriter& w) {
  const char* a = GgufArchName(c.arch);
  auto u32 = [&](const char* key, int v) { w.Set(Key(a, key), GgufValue::U32(v)); };
  auto f32 = [&](const char* key, float v) { w.Set(Key(a, key), GgufValue::F32(v)); };
  u32("vocab_size", c.vocab_size);
  u32("context_length", c.max_position_embeddings);
  u32("embedding_length", c.hidden_size);
  u32("block_count", c.num_layers);
  const Family& family = FamilyOf(c.arch);
  const bool dense_ff = !family.GgufFeedForwardIsExpert();
  // For these, feed_forward_length is the dense FFN size (0 = none); for the others,
  // llama.cpp sizes the experts by it.
  if (!dense_ff) u32("feed_forward_length", c.moe_intermediate_size);
  if (dense_ff && c.intermediate_size > 0) u32("feed_forward_length", c.intermediate_size);
  u32("attention.head_count", c.num_heads);
  u32("attention.head_count_kv", c.num_kv_heads);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  u32("rope.dimension_count", c.head_dim);
  f32("rope.freq_base", c.rope_theta);
  f32("attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  u32("expert_count", c.num_experts);
  u32("expert_used_count", c.num_experts_per_tok);
  u32("expert_feed_forward_length", c.moe_intermediate_size);
  // Where llama.cpp's graph fixes the top-k renormalisation it ignores the key, so a model
  // that differs from it cannot be written as that architecture.
  if (const std::optional<bool> fixed = LlamaCppFixedTopKNorm(c.arch)) {
    Check(c.norm_topk_prob == *fixed, "a ", a, " GGUF computes with the top-k routing weights ",
          *fixed ? "renormalised" : "as they are",
          " in llama.cpp (its graph fixes it); this model's norm_topk_prob is ",
          c.norm_topk_prob ? "true" : "false", ", so it cannot be written as GGUF");
  } else {
    w.Set(Key(a, "expert_weights_norm"), GgufValue::Bool(c.norm_topk_prob));
  }
  family.WriteGgufConfig(c, w);
}

uint32_t FileType(DType dtype) {
  switch (dtype) {  // llama.cpp's LLAMA_FTYPE_* ("mostly" this type).
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ8_0:
      return 7;
    case DType::kBF16:
      return 32;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ5_0:
      return 8;
    case DType::kQ5_1:
      return 9;
    case DType::kQ2_K:
      return 10;
    case DType::kQ3_K:
      return 12;  // Q3_K_M
    case DType::kQ4_K:
      return 15;  // Q4_K_M
    case DType::kQ5_K:
      return 17;  // Q5_K_M
    case DType::kQ6_K:
      return 18;
    case DType::kIQ4_NL:
      return 25;
    case DType::kIQ4_XS:
      return 30;
    case DType::kMXFP4:
      return 38;  // MXFP4_MOE
  }
  return 0;
}

struct Plan {
  std::string gguf_name;
  std::vector<int64_t> shape;
  RowCopy copy;
  ByteFill fill = {};  // Set for tensors computed from others (MLA's attn_k_b / attn_v_b).
};

// Vectors, norms, routers and biases (gpt-oss's expert biases are [E, F] matrices).
bool IsSmallTensor(const std::string& stem, const TensorView& t) {
  return t.shape.size() <= 1 || stem.ends_with("_norm") || stem == "ffn_gate_inp" ||
         stem == "ffn_gate_inp_shexp" || t.name.ends_with(".bias");
}

bool ForceF32(const std::string& stem, const TensorView& t, const GgufWriteOptions& o) {
  if (!o.f32_small_tensors || (t.dtype != DType::kF16 && t.dtype != DType::kBF16)) return false;
  return IsSmallTensor(stem, t);
}

// The stored dtype of a non-expert tensor. Quantising leaves small tensors alone (as
// llama.cpp does); a matrix whose rows do not fill whole blocks of the type falls back to
// Q8_0 (as llama-quantize falls back for k-quants), or to F32 when not even that fits.
DType OutputDType(const std::string& stem, const TensorView& t, const GgufWriteOptions& o) {
  if (o.quantize && !IsSmallTensor(stem, t)) {
    if (t.cols() % DTypeBlockElems(*o.quantize) == 0) return *o.quantize;
    const DType fallback = t.cols() % kQ8BlockSize == 0 ? DType::kQ8_0 : DType::kF32;
    Log(LogLevel::kInfo, "gguf: ", t.name, " has rows of ", t.cols(), " elements, not a ",
        "multiple of ", DTypeBlockElems(*o.quantize), "; stored as ", DTypeName(fallback),
        " instead of ", DTypeName(*o.quantize));
    return fallback;
  }
  return ForceF32(stem, t, o) ? DType::kF32 : t.dtype;
}

// llama-quantize's Q4_K_M keeps more bits (q6_K) where quantisation hurts most: the output
// matrix, and attn_v and ffn_down (routed experts too) on the first and last eighth of the
// layers and every third layer between (its use_more_bits).
bool Q4KMUsesMoreBits(const std::string& gguf_stem, int layer, int num_layers) {
  if (gguf_stem == "output") return true;
  if (gguf_stem != "attn_v" && gguf_stem != "ffn_down" && gguf_stem != "ffn_down_exps")
    return false;
  if (layer < 0 || layer >= num_layers) return false;
  const int eighth = num_layers / 8;
  return layer < eighth || layer >= 7 * num_layers / 8 || (layer - eighth) % 3 == 2;
}

// The block format a quantised tensor takes: options.quantize, or q6_K where the Q4_K_M mix
// asks for it.
GgufWriteOptions WithMix(const GgufWriteOptions& o, const std::string& gguf_stem, int layer,
                         int num_layers) {
  GgufWriteOptions out = o;
  if (o.q4_k_m && Q4KMUsesMoreBits(gguf_stem, layer, num_layers)) out.quantize = DType::kQ6_K;
  return out;
}

// An HF decoder-layer tensor name, "model.layers.N.REST", split into N and REST; nothing for
// any other name.
struct LayerTensorName {
  int layer = 0;
  std::string rest;
};
std::optional<LayerTensorName> SplitLayerName(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  const size_t end = name.find('.', kPrefix.size());
  if (end == std::string_view::npos) return std::nullopt;
  const std::optional<int> layer = ParseIndex(name.substr(kPrefix.size(), end - kPrefix.size()));
  if (!layer) return std::nullopt;
  return LayerTensorName{*layer, std::string(name.substr(end + 1))};
}

// DeepSeek-V2/V3 (and GLM-4.5) tensors without a one-to-one GGUF name: kv_b_proj (split
// into attn_k_b and attn_v_b, as llama.cpp's converter stores it), the gate's correction
// bias (exp_probs_b.bias, f32) and MTP layers (not written). True when `name` was handled.
bool WriteMlaSpecial(const ModelConfig& c, const std::string& name, const TensorView& t,
                     const GgufWriteOptions& o,
                     std::map<std::pair<int, std::string>, Plan>& plans) {
  const std::optional<LayerTensorName> split = SplitLayerName(name);
  if (!split) return false;
  const int layer = split->layer;
  if (layer >= c.num_layers && layer < c.num_layers + c.num_nextn_predict_layers) {
    Log(LogLevel::kInfo, "gguf: multi-token-prediction tensor ", name, " is not written");
    return true;
  }
  const std::string& rest = split->rest;
  const std::string blk = "blk." + std::to_string(layer) + ".";
  if (rest == TensorNamesFor(c).router_bias) {
    const std::string out = blk + gguf_deepseek2::kGgufRouterBias + ".bias";
    const DType dtype = o.f32_small_tensors ? DType::kF32 : t.dtype;
    plans[{layer, out}] = {out, t.shape, MakeRowCopy({&t}, dtype, 0, false, t.name), {}};
    return true;
  }
  if (rest != "self_attn.kv_b_proj.weight") return false;
  DType dtype = t.dtype;
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) dtype = DType::kF32;
  for (bool k : {true, false}) {
    gguf_deepseek2::SplitTensor split =
        k ? gguf_deepseek2::KBFromKvB(t, c, dtype) : gguf_deepseek2::VBFromKvB(t, c, dtype);
    const std::string out = blk + (k ? "attn_k_b" : "attn_v_b") + ".weight";
    Plan plan{out, split.shape, MakeRowCopy({&t}, dtype, 0, false, t.name), split.fill};
    plans[{layer, out}] = std::move(plan);
  }
  return true;
}

// gpt-oss's self_attn.sinks (no .weight in HF) as blk.N.attn_sinks.weight, f32 like every
// vector llama.cpp reads. True when `name` was handled.
bool WriteGptOssSinks(const ModelConfig& c, const std::string& name, const TensorView& t,
                      const GgufWriteOptions& o,
                      std::map<std::pair<int, std::string>, Plan>& plans) {
  const std::string prefix = "model.layers.";
  const std::string tail = std::string(".") + gguf_gpt_oss::kHfSinks;
  if (name.rfind(prefix, 0) != 0 || !name.ends_with(tail)) return false;
  const std::optional<int> layer = ParseIndex(
      std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - tail.size()));
  if (!layer || *layer >= c.num_layers) return false;
  const std::string out =
      "blk." + std::to_string(*layer) + "." + gguf_gpt_oss::kGgufSinks + ".weight";
  const DType dtype = o.f32_small_tensors ? DType::kF32 : t.dtype;
  plans[{*layer, out}] = {out, t.shape, MakeRowCopy({&t}, dtype, 0, false, t.name), {}};
  return true;
}

// A tensor written as f32 values f(x) of its own.
Plan TransformedF32(const std::string& out, std::vector<int64_t> shape, const TensorView& t,
                    float (*f)(float)) {
  auto values = std::make_shared<std::vector<float>>(TensorToF32(t));
  for (float& v : *values) v = f(v);
  return {out, std::move(shape), MakeRowCopy({&t}, DType::kF32, 0, false, t.name),
          [values](size_t offset, std::span<std::byte> bytes) {
            std::memcpy(bytes.data(), reinterpret_cast<const std::byte*>(values->data()) + offset,
                        bytes.size());
          }};
}

// llama.cpp's converter for Qwen3.5 (qwen35moe) stores the value heads tiled: its v head
// j * k_heads + g is HF's g * r + j (arch/qwen3_5_moe.cc). Rewrites HF's grouped order so:
// the v rows of in_proj_qkv, the rows of in_proj_z, in_proj_b and in_proj_a, the v channels
// of conv1d, A_log and dt_bias, and out_proj's columns (written f32). True when handled.
bool WriteTiledValueHeads(const ModelConfig& c, int layer, const std::string& rest,
                          const TensorView& t, const GgufWriteOptions& o,
                          std::map<std::pair<int, std::string>, Plan>& plans) {
  const GatedDeltaNet& g = *c.delta_net;
  const int64_t nk = g.num_k_heads, nv = g.num_v_heads, dv = g.v_head_dim;
  if (c.arch != Arch::kQwen35Moe || g.tiled_v_heads || nk == nv) return false;
  const int64_t r = nv / nk;
  const auto source_head = [&](int64_t u) { return (u % nk) * r + u / nk; };
  const std::string blk = "blk." + std::to_string(layer) + ".";
  const TensorNames n = TensorNamesFor(c);
  // Rows [0, fixed) as they are, then `nv` heads of `width` rows each, tiled.
  const auto gathered = [&](const std::string& stem, const std::string& suffix, int64_t fixed,
                            int64_t width, std::optional<DType> dtype) {
    auto rows = std::make_shared<std::vector<int64_t>>();
    for (int64_t i = 0; i < fixed; ++i) rows->push_back(i);
    for (int64_t u = 0; u < nv; ++u)
      for (int64_t i = 0; i < width; ++i) rows->push_back(fixed + source_head(u) * width + i);
    const std::string out = blk + stem + suffix;
    RowCopy copy = MakeRowCopy(
        {&t}, dtype.value_or(OutputDType(stem, t, WithMix(o, stem, layer, c.num_layers))), 0, false,
        t.name);
    Check(copy.total_units == static_cast<int64_t>(rows->size()), t.name, ": shape ",
          ShapeString(t.shape), " has not ", rows->size(), " rows");
    copy.gather = rows;
    std::vector<int64_t> shape = t.shape;
    if (stem == "ssm_conv1d") shape = {g.conv_dim(), g.conv_kernel};
    plans[{layer, out}] = {out, shape, copy};
  };
  if (rest == n.gdn_qkv)
    gathered("attn_qkv", ".weight", 2 * g.key_dim(), dv, std::nullopt);
  else if (rest == n.gdn_z)
    gathered("attn_gate", ".weight", 0, dv, std::nullopt);
  else if (rest == n.gdn_b)
    gathered("ssm_beta", ".weight", 0, 1, std::nullopt);
  else if (rest == n.gdn_a)
    gathered("ssm_alpha", ".weight", 0, 1, std::nullopt);
  else if (rest == n.gdn_conv)
    gathered("ssm_conv1d", ".weight", 2 * g.key_dim(), dv, DType::kF32);
  else if (rest == n.gdn_a_log || rest == n.gdn_dt_bias || rest == n.gdn_out) {
    const std::vector<float> in = TensorToF32(t);
    auto values = std::make_shared<std::vector<float>>(in.size());
    std::string out;
    if (rest != n.gdn_out) {  // One value per head: ssm_a = -exp(A_log), ssm_dt.bias.
      const bool a_log = rest == n.gdn_a_log;
      for (int64_t u = 0; u < nv; ++u) {
        const float v = in[static_cast<size_t>(source_head(u))];
        (*values)[static_cast<size_t>(u)] = a_log ? -std::exp(v) : v;
      }
      out = blk + (a_log ? "ssm_a" : "ssm_dt.bias");
    } else {
      const int64_t cols = g.value_dim(), rows = static_cast<int64_t>(in.size()) / cols;
      for (int64_t row = 0; row < rows; ++row)
        for (int64_t u = 0; u < nv; ++u)
          for (int64_t i = 0; i < dv; ++i)
            (*values)[static_cast<size_t>(row * cols + u * dv + i)] =
                in[static_cast<size_t>(row * cols + source_head(u) * dv + i)];
      out = blk + "ssm_out.weight";
    }
    plans[{layer, out}] = {
        out, t.shape, MakeRowCopy({&t}, DType::kF32, 0, false, t.name),
        [values](size_t offset, std::span<std::byte> bytes) {
          std::memcpy(bytes.data(), reinterpret_cast<const std::byte*>(values->data()) + offset,
                      bytes.size());
        }};
  } else {
    return false;
  }
  return true;
}

// What llama.cpp's converter changes in Qwen3-Next's tensors (its Qwen3NextModel): the
// zero-centred norms stored with the 1 added, A_log stored as ssm_a = -exp(A_log) (a name
// without a suffix), dt_bias as ssm_dt.bias, conv1d squeezed to [channels, kernel], all f32;
// the MTP layers (mtp.*) are not written. True when `name` was handled.
bool WriteDeltaNetSpecial(const ModelConfig& c, const std::string& name, const TensorView& t,
                          const GgufWriteOptions& o,
                          std::map<std::pair<int, std::string>, Plan>& plans) {
  if (name.rfind("mtp.", 0) == 0) return true;
  const auto add_one = [](float x) { return x + 1.0f; };
  if (name == "model.norm.weight" && c.norm_weight_offset != 0.0f) {
    plans[{INT_MAX, "output_norm.weight"}] =
        TransformedF32("output_norm.weight", t.shape, t, add_one);
    return true;
  }
  const std::optional<LayerTensorName> split = SplitLayerName(name);
  if (!split || split->layer >= c.num_layers) return false;
  const int layer = split->layer;
  const std::string& rest = split->rest;
  const std::string blk = "blk." + std::to_string(layer) + ".";
  const std::pair<const char*, const char*> norms[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"}};
  for (const auto& [hf, gguf] : norms)
    if (rest == hf && c.norm_weight_offset != 0.0f) {
      plans[{layer, blk + gguf}] = TransformedF32(blk + gguf, t.shape, t, add_one);
      return true;
    }
  if (WriteTiledValueHeads(c, layer, rest, t, o, plans)) return true;
  const TensorNames n = TensorNamesFor(c);
  if (rest == n.gdn_a_log) {
    plans[{layer, blk + "ssm_a"}] =
        TransformedF32(blk + "ssm_a", t.shape, t, [](float a) { return -std::exp(a); });
    return true;
  }
  if (rest == n.gdn_dt_bias) {
    plans[{layer, blk + "ssm_dt.bias"}] = {blk + "ssm_dt.bias", t.shape,
                                           MakeRowCopy({&t}, DType::kF32, 0, false, t.name)};
    return true;
  }
  if (rest == n.gdn_qkvz && c.delta_net) {
    // As llama.cpp's converter does: HF's per-key-head groups [q, k, v, z] become attn_qkv
    // (every q head, every k head, every v head) and attn_gate (every z head), by rows.
    const GatedDeltaNet& g = *c.delta_net;
    const int64_t dk = g.k_head_dim, rv = g.num_v_heads / g.num_k_heads * g.v_head_dim;
    const int64_t group = 2 * dk + 2 * rv;
    Check(t.shape.size() == 2 && t.shape[0] == g.num_k_heads * group, t.name, ": shape ",
          ShapeString(t.shape), " has not ", g.num_k_heads * group, " rows");
    auto qkv = std::make_shared<std::vector<int64_t>>();
    auto z = std::make_shared<std::vector<int64_t>>();
    for (const int64_t offset : {int64_t{0}, dk})  // Every q head, then every k head.
      for (int64_t h = 0; h < g.num_k_heads; ++h)
        for (int64_t i = 0; i < dk; ++i) qkv->push_back(h * group + offset + i);
    for (int64_t h = 0; h < g.num_k_heads; ++h)
      for (int64_t i = 0; i < rv; ++i) {
        qkv->push_back(h * group + 2 * dk + i);
        z->push_back(h * group + 2 * dk + rv + i);
      }
    for (const auto& [stem, rows] :
         {std::pair{std::string("attn_qkv"), qkv}, std::pair{std::string("attn_gate"), z}}) {
      const std::string out = blk + stem + ".weight";
      RowCopy copy = MakeRowCopy({&t}, OutputDType(stem, t, WithMix(o, stem, layer, c.num_layers)),
                                 0, false, t.name);
      copy.gather = rows;
      copy.total_units = static_cast<int64_t>(rows->size());
      plans[{layer, out}] = {out, {copy.total_units, t.shape[1]}, copy};
    }
    return true;
  }
  if (rest == n.gdn_conv && c.delta_net) {
    const std::vector<int64_t> shape = {c.delta_net->conv_dim(), c.delta_net->conv_kernel};
    Check(t.numel() == shape[0] * shape[1], t.name, ": shape ", ShapeString(t.shape), " is not [",
          shape[0], ", 1, ", shape[1], "]");
    plans[{layer, blk + "ssm_conv1d.weight"}] = {blk + "ssm_conv1d.weight", shape,
                                                 MakeRowCopy({&t}, DType::kF32, 0, false, t.name)};
    return true;
  }
  return false;
}

}  // namespace

void WriteGgufModel(const ModelConfig& config, const WeightSource& hf, const GgufFile* tokenizer,
                    const std::string& out_path, const GgufWriteOptions& options) {
  config.Validate();
  const ArchNames names = NamesFor(config.arch);
  const bool permutes = GgufPermutesQK(config.arch);
  Check(!options.quantize || IsBlockQuantized(*options.quantize),
        "gguf: can only quantise to a block format (q8_0, q4_K, ...), not ",
        DTypeName(options.quantize.value_or(DType::kF32)));
  Check(!options.q4_k_m || options.quantize == DType::kQ4_K,
        "gguf: the Q4_K_M mix quantises to q4_K (and q6_K)");
  // Ordered by (layer, name); whole-model tensors go first (embedding) or last (output).
  std::map<std::pair<int, std::string>, Plan> plans;
  std::map<std::pair<int, int>, std::vector<const TensorView*>> experts;  // (layer, matrix)

  auto add_plan = [&](int order, const std::string& stem, const std::string& gguf_name,
                      const TensorView& t, int permute_heads) {
    const DType out = OutputDType(stem, t, WithMix(options, stem, order, config.num_layers));
    plans[{order, gguf_name}] = {gguf_name, t.shape,
                                 MakeRowCopy({&t}, out, permute_heads, false, t.name)};
  };

  for (const std::string& name : hf.Names()) {
    if (name.ends_with("rotary_emb.inv_freq")) continue;  // Recomputed, never stored.
    const TensorView& t = hf.Get(name);
    if ((config.mla || config.arch == Arch::kGlm4Moe || config.arch == Arch::kMiniMaxM2) &&
        WriteMlaSpecial(config, name, t, options, plans))
      continue;
    if (config.arch == Arch::kGptOss && WriteGptOssSinks(config, name, t, options, plans)) continue;
    if (config.delta_net && WriteDeltaNetSpecial(config, name, t, options, plans)) continue;
    const size_t dot = name.rfind('.');
    const std::string suffix = dot == std::string::npos ? "" : name.substr(dot + 1);
    const std::string stem = dot == std::string::npos ? name : name.substr(0, dot);
    bool mapped = false;
    for (const NamePair& p : kGlobalNames) {
      if (p.hf == stem && IsSuffix(suffix)) {
        add_plan(p.gguf == "token_embd" ? -1 : INT_MAX, p.gguf, p.gguf + "." + suffix, t, 0);
        mapped = true;
      }
    }
    const std::string prefix = "model.layers.";
    if (!mapped && stem.rfind(prefix, 0) == 0 && IsSuffix(suffix)) {
      const size_t end = stem.find('.', prefix.size());
      const std::optional<int> layer =
          end == std::string::npos
              ? std::nullopt
              : ParseIndex(std::string_view(stem).substr(prefix.size(), end - prefix.size()));
      if (layer) {
        Check(*layer < config.num_layers, hf.Describe(), ": tensor ", name,
              " is beyond num_hidden_layers ", config.num_layers);
        const std::string rest = stem.substr(end + 1);
        if (rest.rfind(names.expert_prefix, 0) == 0 && suffix == "weight") {
          const std::string tail = rest.substr(names.expert_prefix.size());
          const size_t d = tail.find('.');
          // -1 when the index does not parse (also keeps GCC's optional analysis quiet).
          const int e = d == std::string::npos ? -1 : ParseIndex(tail.substr(0, d)).value_or(-1);
          const std::string mat = d == std::string::npos ? "" : tail.substr(d + 1);
          const auto m = std::find(names.expert_mats.begin(), names.expert_mats.end(), mat);
          if (e >= 0 && m != names.expert_mats.end()) {
            Check(e < config.num_experts, hf.Describe(), ": tensor ", name,
                  " is beyond num_experts ", config.num_experts);
            auto& group = experts[{*layer, static_cast<int>(m - names.expert_mats.begin())}];
            group.resize(config.num_experts, nullptr);
            group[e] = &t;
            mapped = true;
          }
        }
        for (const NamePair& p : names.layer) {
          if (mapped || p.hf != rest) continue;
          int heads = 0;
          if (permutes && p.gguf == "attn_q") heads = config.num_heads;
          if (permutes && p.gguf == "attn_k") heads = config.num_kv_heads;
          add_plan(*layer, p.gguf, "blk." + std::to_string(*layer) + "." + p.gguf + "." + suffix, t,
                   heads);
          mapped = true;
        }
      }
    }
    Check(mapped, hf.Describe(), ": cannot map tensor '", name, "' to a GGUF name for ",
          ArchName(config.arch));
  }

  std::optional<DType> expert_dtype;
  for (auto& [key, group] : experts) {
    const auto [layer, mat] = key;
    const std::string what = HfExpertName(names, layer, 0, mat);
    for (size_t e = 0; e < group.size(); ++e) {
      Check(group[e] != nullptr, hf.Describe(), ": missing tensor '",
            HfExpertName(names, layer, static_cast<int>(e), mat), "' (all ", group.size(),
            " experts are needed to stack them)");
      Check(group[e]->shape == group[0]->shape && group[e]->dtype == group[0]->dtype, hf.Describe(),
            ": experts of layer ", layer, " differ in shape or dtype (", group[e]->name, " vs ",
            group[0]->name, ")");
    }
    Check(group[0]->shape.size() == 2, hf.Describe(), ": expert tensor ", group[0]->name,
          " must be 2-D, has shape ", ShapeString(group[0]->shape));
    const std::string gguf_name =
        "blk." + std::to_string(layer) + "." + kExpsStems[mat] + ".weight";
    std::vector<int64_t> shape = {static_cast<int64_t>(group.size()), group[0]->shape[0],
                                  group[0]->shape[1]};
    const DType out = WithMix(options, kExpsStems[mat], layer, config.num_layers)
                          .quantize.value_or(group[0]->dtype);
    // Routed experts must stay in blocks (expert_layout.h), so no per-tensor fallback here.
    const int block = DTypeBlockElems(out);
    Check(group[0]->cols() % block == 0, hf.Describe(), ": cannot store routed expert tensor ",
          group[0]->name, " as ", DTypeName(out), ": its rows have ", group[0]->cols(),
          " elements, not a multiple of ", block, " (", DTypeName(out),
          " experts need hidden_size and moe_intermediate_size to be multiples of ", block,
          "; a 32-element format such as q8_0 or q4_0 fits more shapes)");
    expert_dtype = options.q4_k_m ? DType::kQ4_K : out;  // general.file_type: Q4_K_M.
    plans[{layer, gguf_name}] = {gguf_name, shape, MakeRowCopy(group, out, 0, false, what)};
  }

  GgufWriter w(options.alignment);
  w.Set("general.architecture", GgufValue::String(GgufArchName(config.arch)));
  w.Set("general.name", GgufValue::String(options.name));
  if (!expert_dtype && !plans.empty()) expert_dtype = plans.begin()->second.copy.out_dtype;
  w.Set("general.file_type", GgufValue::U32(FileType(expert_dtype.value_or(DType::kF32))));
  SetArchMetadata(config, w);
  if (const std::optional<SamplingDefaults>& d = options.sampling) {
    d->Validate();
    w.Set("general.sampling.temp", GgufValue::F32(d->temperature));
    w.Set("general.sampling.top_k", GgufValue::I32(d->top_k));
    w.Set("general.sampling.top_p", GgufValue::F32(d->top_p));
    w.Set("general.sampling.min_p", GgufValue::F32(d->min_p));
    w.Set("general.sampling.penalty_repeat", GgufValue::F32(d->repetition_penalty));
    w.Set("general.sampling.penalty_last_n", GgufValue::I32(d->repeat_last_n));
  }
  CopyTokenizer(tokenizer, config, w);
  if (config.longrope) {  // llama.cpp's LongRoPE factors: F32 [head_dim / 2], global.
    const LongRope& lr = *config.longrope;
    // llama's one set of frequency factors (rope_freqs.weight) is LongRoPE with equal sets.
    const bool freqs = (config.arch == Arch::kMixtral || config.arch == Arch::kLlama4) &&
                       lr.short_factor == lr.long_factor && lr.short_mscale == 1.0f &&
                       lr.long_mscale == 1.0f;
    Check(config.arch == Arch::kPhiMoe || freqs,
          "gguf: LongRoPE is written for phimoe only (llama: one set of factors, mscale 1)");
    using Factors = std::pair<const char*, const std::vector<float>*>;
    const std::vector<Factors> tensors =
        freqs ? std::vector<Factors>{{"rope_freqs.weight", &lr.long_factor}}
              : std::vector<Factors>{{"rope_factors_long.weight", &lr.long_factor},
                                     {"rope_factors_short.weight", &lr.short_factor}};
    for (const auto& [name, values] : tensors) {
      const std::vector<float> data = *values;
      w.AddTensor(name, DType::kF32, {static_cast<int64_t>(data.size())},
                  [data](size_t offset, std::span<std::byte> out) {
                    std::memcpy(out.data(),
                                reinterpret_cast<const std::byte*>(data.data()) + offset,
                                out.size());
                  });
    }
  }
  for (auto& [key, plan] : plans) {
    const RowCopy copy = plan.copy;
    if (plan.fill) {
      w.AddTensor(plan.gguf_name, copy.out_dtype, plan.shape, plan.fill);
      continue;
    }
    w.AddTensor(plan.gguf_name, copy.out_dtype, plan.shape,
                [copy](size_t offset, std::span<std::byte> out) { copy.Copy(offset, out); });
  }
  w.Write(out_path);
}

}  // namespace moex

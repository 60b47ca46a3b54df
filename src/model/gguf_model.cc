#include "model/gguf_model.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "io/gguf_format.h"
#include "io/gguf_writer.h"
#include "kernels/quantize.h"

namespace moex {

namespace {

// ---------------------------------------------------------------------------------------
// Name mapping. HF stems omit "model.layers.{i}." and the ".weight"/".bias" suffix; GGUF
// stems omit "blk.{i}." and the suffix.

struct NamePair {
  std::string hf;
  std::string gguf;
};

const NamePair kGlobalNames[] = {
    {"model.embed_tokens", "token_embd"}, {"model.norm", "output_norm"}, {"lm_head", "output"}};

const NamePair kCommonLayerNames[] = {
    {"input_layernorm", "attn_norm"},    {"post_attention_layernorm", "ffn_norm"},
    {"self_attn.q_proj", "attn_q"},      {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},      {"self_attn.o_proj", "attn_output"},
    {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
    {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
};

// Routed expert matrices in gate, up, down order.
constexpr std::array<const char*, 3> kExpsStems = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
// Older llama.cpp files store Mixtral experts one by one as blk.{i}.ffn_gate.{e}.weight.
constexpr std::array<const char*, 3> kLegacyExpertStems = {"ffn_gate", "ffn_up", "ffn_down"};

struct ArchNames {
  std::vector<NamePair> layer;
  std::string expert_prefix;               // Followed by "{e}.{matrix}".
  std::array<std::string, 3> expert_mats;  // HF matrix names for gate, up, down.
};

ArchNames NamesFor(Arch arch) {
  ArchNames n;
  n.layer.assign(std::begin(kCommonLayerNames), std::end(kCommonLayerNames));
  if (arch == Arch::kMixtral || arch == Arch::kPhiMoe) {
    n.layer.push_back({"block_sparse_moe.gate", "ffn_gate_inp"});
    n.expert_prefix = "block_sparse_moe.experts.";
    n.expert_mats = {"w1", "w3", "w2"};
  } else {
    n.layer.push_back({"mlp.gate", "ffn_gate_inp"});
    n.expert_prefix = "mlp.experts.";
    n.expert_mats = {"gate_proj", "up_proj", "down_proj"};
  }
  const char* shared = arch == Arch::kQwen2Moe      ? "mlp.shared_expert."
                       : arch == Arch::kDeepseekMoe ? "mlp.shared_experts."
                                                    : nullptr;
  if (shared != nullptr) {
    n.layer.push_back({std::string(shared) + "gate_proj", "ffn_gate_shexp"});
    n.layer.push_back({std::string(shared) + "up_proj", "ffn_up_shexp"});
    n.layer.push_back({std::string(shared) + "down_proj", "ffn_down_shexp"});
  }
  if (arch == Arch::kQwen2Moe) n.layer.push_back({"mlp.shared_expert_gate", "ffn_gate_inp_shexp"});
  return n;
}

std::optional<int> ParseIndex(std::string_view s) {
  if (s.empty() || s.size() > 9 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string_view> Split(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    parts.push_back(s.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

bool IsSuffix(std::string_view s) {
  return s == "weight" || s == "bias";
}

std::string LayerPrefix(int layer) {
  return "model.layers." + std::to_string(layer) + ".";
}

std::string HfExpertName(const ArchNames& n, int layer, int expert, int mat) {
  return LayerPrefix(layer) + n.expert_prefix + std::to_string(expert) + "." + n.expert_mats[mat] +
         ".weight";
}

// ---------------------------------------------------------------------------------------
// Row copies: stacking experts, permuting Q/K rows and widening to F32, in pieces.

void ToF32(DType src, const std::byte* in, int64_t n, std::byte* out) {
  for (int64_t i = 0; i < n; ++i) {
    float f;
    if (src == DType::kF32) {
      std::memcpy(&f, in + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      f = src == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
    }
    std::memcpy(out + 4 * i, &f, 4);
  }
}

// Output units (rows, or single elements of a permuted bias) drawn from source units of
// `parts` stacked along axis 0.
struct RowCopy {
  std::vector<const TensorView*> parts;
  DType src_dtype = DType::kF32;
  DType out_dtype = DType::kF32;
  int64_t unit_cols = 1;
  int64_t units_per_part = 0;
  int64_t total_units = 0;
  int permute_heads = 0;   // 0 = identity.
  bool unpermute = false;  // GGUF -> HF instead of HF -> GGUF.

  // llama.cpp's permute views each head's rows as [2, head_dim/2] and transposes them to
  // [head_dim/2, 2]: GGUF row 2i+j of a head is HF row j*head_dim/2+i.
  int64_t SourceUnit(int64_t u) const {
    if (permute_heads == 0) return u;
    const int64_t hd = total_units / permute_heads;
    const int64_t half = hd / 2;
    const int64_t head = u / hd;
    const int64_t r = u % hd;
    if (!unpermute) return head * hd + (r % 2) * half + r / 2;
    return head * hd + 2 * (r % half) + r / half;
  }

  void Copy(size_t offset, std::span<std::byte> out) const {
    const size_t out_unit = DTypeBytes(out_dtype, unit_cols);
    const size_t src_unit = DTypeBytes(src_dtype, unit_cols);
    Check(offset % out_unit == 0 && out.size() % out_unit == 0,
          "internal: tensor piece not aligned to rows");
    const int64_t first = static_cast<int64_t>(offset / out_unit);
    const int64_t n = static_cast<int64_t>(out.size() / out_unit);
    Check(first + n <= total_units, "internal: tensor piece out of range");
    for (int64_t k = 0; k < n;) {
      const int64_t s = SourceUnit(first + k);
      const TensorView* part = parts[s / units_per_part];
      const int64_t local = s % units_per_part;
      // Without permutation, copy the rest of this part's run in one go.
      const int64_t run = permute_heads == 0 ? std::min(n - k, units_per_part - local) : int64_t{1};
      const std::byte* src = part->data + local * src_unit;
      std::byte* dst = out.data() + k * out_unit;
      if (src_dtype == out_dtype) {
        std::memcpy(dst, src, run * src_unit);
      } else if (out_dtype == DType::kQ8_0) {
        // Rows are quantised one by one: Q8_0 blocks run along a row.
        std::vector<float> row(static_cast<size_t>(unit_cols));
        for (int64_t r = 0; r < run; ++r) {
          ToF32(src_dtype, src + r * src_unit, unit_cols, reinterpret_cast<std::byte*>(row.data()));
          kernels::QuantizeQ8_0(row.data(), unit_cols, dst + r * out_unit);
        }
      } else {
        ToF32(src_dtype, src, run * unit_cols, dst);
      }
      k += run;
    }
  }
};

// Sets unit geometry for `parts` (identical shapes) with an optional permutation.
RowCopy MakeRowCopy(std::vector<const TensorView*> parts, DType out_dtype, int permute_heads,
                    bool unpermute, const std::string& what) {
  RowCopy c;
  const TensorView& first = *parts.front();
  c.parts = std::move(parts);
  c.src_dtype = first.dtype;
  c.out_dtype = out_dtype;
  c.permute_heads = permute_heads;
  c.unpermute = unpermute;
  // A permuted bias is permuted element by element.
  c.unit_cols = permute_heads > 0 && first.shape.size() == 1 ? 1 : first.cols();
  if (c.unit_cols == 0) c.unit_cols = 1;
  c.units_per_part = first.numel() / c.unit_cols;
  c.total_units = c.units_per_part * static_cast<int64_t>(c.parts.size());
  if (permute_heads > 0) {
    Check(first.dtype != DType::kQ8_0 || c.unit_cols % kQ8BlockSize == 0, what,
          ": cannot permute a q8_0 bias");
    Check(c.total_units % permute_heads == 0 && (c.total_units / permute_heads) % 2 == 0, what,
          ": ", c.total_units, " rows cannot be split into ", permute_heads,
          " heads of even size for the Q/K permutation");
  }
  return c;
}

// ---------------------------------------------------------------------------------------
// The GGUF weight source.

class GgufWeights : public WeightSource {
 public:
  GgufWeights(std::shared_ptr<const GgufFile> file, const ModelConfig& config);

  const TensorView* Find(const std::string& name) const override;
  std::vector<std::string> Names() const override;
  std::string Describe() const override { return file_->path(); }
  void ReleasePages(const TensorView& tensor) const override { file_->ReleasePages(tensor); }

 private:
  struct Entry {
    TensorView view;
    std::optional<RowCopy> unpermute;  // Set for Q/K that need an owned, un-permuted copy.
    std::vector<std::byte> owned;
    std::once_flag once;
  };
  Entry& Add(const std::string& hf_name, const TensorView& view);

  std::shared_ptr<const GgufFile> file_;
  std::unordered_map<std::string, std::unique_ptr<Entry>> entries_;
};

GgufWeights::Entry& GgufWeights::Add(const std::string& hf_name, const TensorView& view) {
  auto entry = std::make_unique<Entry>();
  entry->view = view;
  entry->view.name = hf_name;
  auto [it, inserted] = entries_.emplace(hf_name, std::move(entry));
  Check(inserted, file_->path(), ": two GGUF tensors map to '", hf_name, "'");
  return *it->second;
}

GgufWeights::GgufWeights(std::shared_ptr<const GgufFile> file, const ModelConfig& config)
    : file_(std::move(file)) {
  const GgufFile& f = *file_;
  const ArchNames names = NamesFor(config.arch);
  std::unordered_map<std::string, std::string> layer_map;
  for (const auto& p : names.layer) layer_map[p.gguf] = p.hf;
  const bool permutes = GgufPermutesQK(config.arch);

  for (const GgufTensorInfo& info : f.tensor_infos()) {
    const std::vector<std::string_view> parts = Split(info.name);
    const std::string suffix(parts.back());
    // Whole-model tensors.
    if (parts.size() == 2 && IsSuffix(suffix)) {
      const auto it = std::find_if(std::begin(kGlobalNames), std::end(kGlobalNames),
                                   [&](const NamePair& p) { return p.gguf == parts[0]; });
      if (it != std::end(kGlobalNames)) {
        Add(it->hf + "." + suffix, *f.FindTensor(info.name));
        continue;
      }
    }
    const std::optional<int> layer =
        parts.size() >= 4 && parts[0] == "blk" ? ParseIndex(parts[1]) : std::nullopt;
    if (!layer || !IsSuffix(suffix)) {
      Log(LogLevel::kDebug, f.path(), ": ignoring tensor ", info.name);
      continue;
    }
    const std::string stem(parts[2]);
    const int l = *layer;
    Check(l < config.num_layers, f.path(), ": tensor ", info.name, " is beyond block_count ",
          config.num_layers);
    if (parts.size() == 4) {
      const auto exps = std::find(kExpsStems.begin(), kExpsStems.end(), stem);
      if (exps != kExpsStems.end() && suffix == "weight") {
        const TensorView& t = *f.FindTensor(info.name);
        Check(t.shape.size() == 3 && t.shape[0] == config.num_experts && t.shape[1] > 0 &&
                  t.shape[2] > 0,
              f.path(), ": expert tensor ", info.name, " has shape ", ShapeString(t.shape),
              ", expected [", config.num_experts, ", rows, cols]");
        const int mat = static_cast<int>(exps - kExpsStems.begin());
        const size_t slice = t.nbytes / static_cast<size_t>(std::max<int64_t>(t.shape[0], 1));
        for (int64_t e = 0; e < t.shape[0]; ++e) {
          TensorView v = t;
          v.shape = {t.shape[1], t.shape[2]};
          v.data = t.data + static_cast<size_t>(e) * slice;
          v.nbytes = slice;
          Add(HfExpertName(names, l, static_cast<int>(e), mat), v);
        }
        continue;
      }
      const auto hf = layer_map.find(stem);
      if (hf != layer_map.end()) {
        const TensorView& t = *f.FindTensor(info.name);
        Entry& entry = Add(LayerPrefix(l) + hf->second + "." + suffix, t);
        if (permutes && (stem == "attn_q" || stem == "attn_k")) {
          const int heads = stem == "attn_q" ? config.num_heads : config.num_kv_heads;
          entry.unpermute = MakeRowCopy({&t}, t.dtype, heads, true, info.name);
          entry.view.data = nullptr;  // Filled on first Find().
        }
        continue;
      }
    }
    if (parts.size() == 5 && suffix == "weight") {
      const auto legacy = std::find(kLegacyExpertStems.begin(), kLegacyExpertStems.end(), stem);
      const std::optional<int> expert = ParseIndex(parts[3]);
      if (legacy != kLegacyExpertStems.end() && expert) {
        Check(*expert < config.num_experts, f.path(), ": tensor ", info.name,
              " is beyond expert_count ", config.num_experts);
        const int mat = static_cast<int>(legacy - kLegacyExpertStems.begin());
        Add(HfExpertName(names, l, *expert, mat), *f.FindTensor(info.name));
        continue;
      }
    }
    Log(LogLevel::kDebug, f.path(), ": ignoring tensor ", info.name);
  }
}

const TensorView* GgufWeights::Find(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  Entry& e = *it->second;
  if (e.unpermute) {
    std::call_once(e.once, [&] {
      e.owned.resize(e.view.nbytes);
      e.unpermute->Copy(0, e.owned);
      e.view.data = e.owned.data();
    });
  }
  return &e.view;
}

std::vector<std::string> GgufWeights::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

// ---------------------------------------------------------------------------------------
// Metadata.

constexpr int kMaxExperts = 4096;
constexpr int kMaxLayers = 1024;
constexpr int64_t kMaxLayerExperts = 1 << 18;

std::string Key(const char* arch, const char* key) {
  return std::string(arch) + "." + key;
}

// A count that llama.cpp may store per layer; moex needs it uniform.
int64_t UniformInt(const GgufFile& f, const std::string& key, std::optional<int64_t> fallback) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) {
    Check(fallback.has_value(), f.path(), ": missing GGUF key '", key, "'");
    return *fallback;
  }
  if (!v->is_array()) return f.GetInt(key);
  const std::vector<int64_t> values = f.GetIntArray(key);
  Check(!values.empty() &&
            std::all_of(values.begin(), values.end(), [&](int64_t x) { return x == values[0]; }),
        f.path(), ": GGUF key '", key, "' varies per layer, which moex does not support");
  return values[0];
}

int ToInt(const GgufFile& f, const std::string& key, int64_t v) {
  Check(v >= 0 && v < (1ll << 31), f.path(), ": GGUF key '", key, "' out of range: ", v);
  return static_cast<int>(v);
}

// A 1-D F32 tensor of `n` values (LongRoPE factors).
std::vector<float> F32Vector(const GgufFile& f, const std::string& name, int64_t n) {
  const TensorView* t = f.FindTensor(name);
  Check(t != nullptr, f.path(), ": missing tensor ", name);
  Check(t->dtype == DType::kF32 && t->shape == std::vector<int64_t>{n}, f.path(), ": tensor ",
        name, " must be F32 of shape [", n, "], is ", DTypeName(t->dtype), " ",
        ShapeString(t->shape));
  std::vector<float> out(static_cast<size_t>(n));
  std::memcpy(out.data(), t->data, out.size() * sizeof(float));
  return out;
}

// Phi-3.5-MoE: LayerNorm and sparsemixer are implied by the architecture. llama.cpp has no
// key for the router jitter (it routes phimoe by softmax top-2) nor for HF's short/long
// mscale; moex writes its own keys for both and otherwise uses PhimoeConfig's jitter
// default and llama.cpp's attn_factor (HF's LongRoPE factor when mscales are absent).
void ReadPhiMoe(const GgufFile& f, ModelConfig& c) {
  c.norm = NormKind::kLayerNorm;
  c.router = RouterKind::kSparseMixer;
  c.norm_topk_prob = false;
  c.router_jitter_noise = f.GetFloat("phimoe.router_jitter_noise", 0.01);
  c.sliding_window = ToInt(f, "phimoe.attention.sliding_window",
                           f.GetInt("phimoe.attention.sliding_window", 0));
  const bool has_long = f.FindTensorInfo("rope_factors_long.weight") != nullptr;
  const bool has_short = f.FindTensorInfo("rope_factors_short.weight") != nullptr;
  if (!has_long && !has_short) return;
  Check(has_long && has_short, f.path(),
        ": LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight");
  LongRope lr;
  const int64_t half = c.head_dim / 2;
  lr.long_factor = F32Vector(f, "rope_factors_long.weight", half);
  lr.short_factor = F32Vector(f, "rope_factors_short.weight", half);
  lr.original_max_position_embeddings =
      ToInt(f, "phimoe.rope.scaling.original_context_length",
            f.GetInt("phimoe.rope.scaling.original_context_length"));
  const double factor =
      static_cast<double>(c.max_position_embeddings) / lr.original_max_position_embeddings;
  const double attn = f.GetFloat(
      "phimoe.rope.scaling.attn_factor",
      factor <= 1.0 ? 1.0
                    : std::sqrt(1.0 + std::log(factor) /
                                          std::log(lr.original_max_position_embeddings)));
  lr.short_mscale = static_cast<float>(f.GetFloat("phimoe.rope.scaling.short_mscale", attn));
  lr.long_mscale = static_cast<float>(f.GetFloat("phimoe.rope.scaling.long_mscale", attn));
  c.longrope = std::move(lr);
}

}  // namespace

const char* GgufArchName(Arch arch) {
  switch (arch) {
    case Arch::kMixtral:
      return "llama";
    case Arch::kPhiMoe:
      return "phimoe";
    case Arch::kQwen2Moe:
      return "qwen2moe";
    case Arch::kQwen3Moe:
      return "qwen3moe";
    case Arch::kOlmoe:
      return "olmoe";
    case Arch::kDeepseekMoe:
      return "deepseek";
  }
  return "?";
}

bool GgufPermutesQK(Arch arch) {
  return arch == Arch::kMixtral || arch == Arch::kDeepseekMoe;
}

ModelConfig ModelConfigFromGguf(const GgufFile& f) {
  const std::string arch_name = f.GetString("general.architecture");
  ModelConfig c;
  if (arch_name == "llama")
    c.arch = Arch::kMixtral;
  else if (arch_name == "phimoe")
    c.arch = Arch::kPhiMoe;
  else if (arch_name == "qwen2moe")
    c.arch = Arch::kQwen2Moe;
  else if (arch_name == "qwen3moe")
    c.arch = Arch::kQwen3Moe;
  else if (arch_name == "olmoe")
    c.arch = Arch::kOlmoe;
  else if (arch_name == "deepseek")
    c.arch = Arch::kDeepseekMoe;
  else if (arch_name == "deepseek2")
    Fail(f.path(), ": GGUF architecture 'deepseek2' (DeepSeek-V2/V3, MLA) is not supported");
  else
    Fail(f.path(), ": unsupported GGUF architecture '", arch_name,
         "' (supported: llama (Mixtral), phimoe, qwen2moe, qwen3moe, olmoe, deepseek)");
  const char* a = arch_name.c_str();
  auto get = [&](const char* key, std::optional<int64_t> fallback = std::nullopt) {
    const std::string k = Key(a, key);
    return ToInt(f, k, UniformInt(f, k, fallback));
  };

  c.num_experts = get("expert_count", 0);
  Check(c.num_experts > 0, f.path(), ": ", arch_name, " model without ", a,
        ".expert_count is not a mixture of experts");
  // Bounds that no real model comes near keep a corrupt file from building millions of
  // tensor entries or scanning billions of layers.
  Check(c.num_experts <= kMaxExperts, f.path(), ": ", a, ".expert_count ", c.num_experts,
        " exceeds ", kMaxExperts);
  c.num_experts_per_tok = get("expert_used_count");
  c.hidden_size = get("embedding_length");
  c.num_layers = get("block_count");
  Check(c.num_layers <= kMaxLayers && int64_t{c.num_layers} * c.num_experts <= kMaxLayerExperts,
        f.path(), ": ", c.num_layers, " layers of ", c.num_experts,
        " experts is beyond what moex supports");
  c.num_heads = get("attention.head_count");
  c.num_kv_heads = get("attention.head_count_kv", c.num_heads);
  c.head_dim = get("attention.key_length", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.max_position_embeddings = get("context_length", 4096);
  c.rope_theta = static_cast<float>(f.GetFloat(Key(a, "rope.freq_base"), 10000.0));
  // llama.cpp reads the RMS key even for Phi-MoE's LayerNorm; accept the LayerNorm key too.
  c.rms_norm_eps =
      static_cast<float>(f.GetFloat(Key(a, "attention.layer_norm_rms_epsilon"),
                                    f.GetFloat(Key(a, "attention.layer_norm_epsilon"), 1e-5)));

  // Vocabulary: the explicit key, else the tokenizer, else the embedding's rows.
  int64_t vocab = f.GetInt(Key(a, "vocab_size"), -1);
  if (vocab < 0 && f.Find("tokenizer.ggml.tokens"))
    vocab = static_cast<int64_t>(f.GetStringArray("tokenizer.ggml.tokens").size());
  if (vocab < 0) {
    const GgufTensorInfo* embd = f.FindTensorInfo("token_embd.weight");
    Check(embd != nullptr && embd->ne.size() == 2, f.path(),
          ": cannot tell the vocabulary size (no vocab_size, tokenizer or token_embd.weight)");
    vocab = embd->ne[1];
  }
  c.vocab_size = ToInt(f, Key(a, "vocab_size"), vocab);

  const int ff = get("feed_forward_length", 0);
  const int expert_ff = get("expert_feed_forward_length", 0);
  switch (c.arch) {
    case Arch::kMixtral:
    case Arch::kPhiMoe:
    case Arch::kOlmoe:
      // llama.cpp sizes these experts by feed_forward_length.
      c.moe_intermediate_size = expert_ff > 0 ? expert_ff : ff;
      break;
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe:
    case Arch::kDeepseekMoe:
      c.moe_intermediate_size = expert_ff;
      c.intermediate_size = ff;
      break;
  }
  if (c.moe_intermediate_size == 0) {
    // Fall back to the expert tensors' shape: [experts, F, hidden].
    const GgufTensorInfo* exps = nullptr;
    for (int l = 0; l < c.num_layers && exps == nullptr; ++l)
      exps = f.FindTensorInfo("blk." + std::to_string(l) + ".ffn_gate_exps.weight");
    Check(exps != nullptr && exps->ne.size() == 3, f.path(),
          ": cannot tell the expert size (no expert_feed_forward_length)");
    c.moe_intermediate_size = ToInt(f, "ffn_gate_exps", exps->ne[1]);
  }

  c.norm_topk_prob =
      f.GetBool(Key(a, "expert_weights_norm"),
                c.arch == Arch::kMixtral || c.arch == Arch::kPhiMoe || c.arch == Arch::kQwen3Moe);
  c.routed_scaling_factor = static_cast<float>(f.GetFloat(Key(a, "expert_weights_scale"), 1.0));
  if (c.arch == Arch::kQwen2Moe) {
    c.shared_expert_intermediate_size = get("expert_shared_feed_forward_length", 0);
    if (c.shared_expert_intermediate_size == 0) {
      if (const GgufTensorInfo* t = f.FindTensorInfo("blk.0.ffn_gate_shexp.weight"))
        c.shared_expert_intermediate_size = ToInt(f, t->name, t->ne.size() == 2 ? t->ne[1] : 0);
    }
    c.shared_expert_gate = c.shared_expert_intermediate_size > 0;
  }
  if (c.arch == Arch::kDeepseekMoe) {
    c.shared_expert_intermediate_size = get("expert_shared_count", 0) * c.moe_intermediate_size;
    c.first_k_dense_replace = get("leading_dense_block_count", 0);
  }
  // MoE layer pattern (Qwen's decoder_sparse_step has no llama.cpp key): from the tensors.
  std::vector<bool> moe(c.num_layers);
  bool any_router = false;
  for (int l = 0; l < c.num_layers; ++l) {
    moe[l] = f.FindTensorInfo("blk." + std::to_string(l) + ".ffn_gate_inp.weight") != nullptr;
    any_router |= moe[l];
  }
  if (any_router) {
    for (int freq = 1; freq <= c.num_layers; ++freq) {
      bool match = true;
      for (int l = 0; l < c.num_layers && match; ++l)
        match = moe[l] == (l >= c.first_k_dense_replace && l % freq == 0);
      if (match) {
        c.moe_layer_freq = freq;
        break;
      }
    }
  }

  c.tie_word_embeddings = f.FindTensorInfo("output.weight") == nullptr;
  c.attention_bias = c.arch == Arch::kQwen2Moe || f.FindTensorInfo("blk.0.attn_q.bias") != nullptr;
  c.attention_out_bias = f.FindTensorInfo("blk.0.attn_output.bias") != nullptr;
  c.lm_head_bias = f.FindTensorInfo("output.bias") != nullptr;
  if (c.arch == Arch::kPhiMoe) ReadPhiMoe(f, c);
  c.qk_norm = c.arch == Arch::kOlmoe || c.arch == Arch::kQwen3Moe;
  c.qk_norm_per_head = c.arch == Arch::kQwen3Moe;

  c.bos_token_id = static_cast<int>(f.GetInt("tokenizer.ggml.bos_token_id", -1));
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    const int64_t id = f.GetInt(key, -1);
    if (id >= 0 &&
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(static_cast<int>(id));
  }
  try {
    c.Validate();
  } catch (const Error& e) {
    Fail(f.path(), ": ", e.what());
  }
  return c;
}

std::unique_ptr<WeightSource> MakeGgufWeightSource(std::shared_ptr<const GgufFile> file,
                                                   const ModelConfig& config) {
  return std::make_unique<GgufWeights>(std::move(file), config);
}

GgufModel OpenGgufModel(const std::string& path) {
  GgufModel m;
  m.file = std::make_shared<const GgufFile>(path);
  m.config = ModelConfigFromGguf(*m.file);
  m.weights = MakeGgufWeightSource(m.file, m.config);
  return m;
}

// ---------------------------------------------------------------------------------------
// Writing.

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
  const bool dense_ff =
      c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe || c.arch == Arch::kDeepseekMoe;
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
  w.Set(Key(a, "expert_weights_norm"), GgufValue::Bool(c.norm_topk_prob));
  if (c.arch == Arch::kQwen2Moe && c.shared_expert_intermediate_size > 0)
    u32("expert_shared_feed_forward_length", c.shared_expert_intermediate_size);
  if (c.arch == Arch::kPhiMoe) {
    // llama.cpp's Phi-3 keys, plus moex's own for what llama.cpp does not carry.
    w.Set(Key(a, "router_jitter_noise"), GgufValue::F64(c.router_jitter_noise));
    if (c.sliding_window > 0) u32("attention.sliding_window", c.sliding_window);
    if (c.longrope) {
      const LongRope& lr = *c.longrope;
      u32("rope.scaling.original_context_length", lr.original_max_position_embeddings);
      const double factor =
          static_cast<double>(c.max_position_embeddings) / lr.original_max_position_embeddings;
      f32("rope.scaling.attn_factor",
          factor <= 1.0 ? 1.0f
                        : static_cast<float>(std::sqrt(
                              1.0 + std::log(factor) / std::log(lr.original_max_position_embeddings))));
      f32("rope.scaling.short_mscale", lr.short_mscale);
      f32("rope.scaling.long_mscale", lr.long_mscale);
    }
  }
  if (c.arch == Arch::kDeepseekMoe) {
    u32("leading_dense_block_count", c.first_k_dense_replace);
    u32("expert_shared_count", c.shared_expert_intermediate_size / c.moe_intermediate_size);
    f32("expert_weights_scale", c.routed_scaling_factor);
  }
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
  }
  return 0;
}

struct Plan {
  std::string gguf_name;
  std::vector<int64_t> shape;
  RowCopy copy;
};

bool IsSmallTensor(const std::string& stem, const TensorView& t) {
  return t.shape.size() <= 1 || stem.ends_with("_norm") || stem == "ffn_gate_inp" ||
         stem == "ffn_gate_inp_shexp";
}

bool ForceF32(const std::string& stem, const TensorView& t, const GgufWriteOptions& o) {
  if (!o.f32_small_tensors || (t.dtype != DType::kF16 && t.dtype != DType::kBF16)) return false;
  return IsSmallTensor(stem, t);
}

// The stored dtype of a non-expert tensor. Quantising leaves small tensors alone (as
// llama.cpp does) and widens matrices whose rows do not fill whole Q8_0 blocks to F32.
DType OutputDType(const std::string& stem, const TensorView& t, const GgufWriteOptions& o) {
  if (o.quantize && !IsSmallTensor(stem, t)) {
    if (t.cols() % kQ8BlockSize == 0) return *o.quantize;
    Log(LogLevel::kInfo, "gguf: ", t.name, " has rows of ", t.cols(), " elements, not a ",
        "multiple of 32; stored as f32 instead of ", DTypeName(*o.quantize));
    return DType::kF32;
  }
  return ForceF32(stem, t, o) ? DType::kF32 : t.dtype;
}

}  // namespace

void WriteGgufModel(const ModelConfig& config, const WeightSource& hf, const GgufFile* tokenizer,
                    const std::string& out_path, const GgufWriteOptions& options) {
  config.Validate();
  const ArchNames names = NamesFor(config.arch);
  const bool permutes = GgufPermutesQK(config.arch);
  Check(!options.quantize || *options.quantize == DType::kQ8_0,
        "gguf: can only quantise to q8_0, not ", DTypeName(options.quantize.value_or(DType::kF32)));
  // Ordered by (layer, name); whole-model tensors go first (embedding) or last (output).
  std::map<std::pair<int, std::string>, Plan> plans;
  std::map<std::pair<int, int>, std::vector<const TensorView*>> experts;  // (layer, matrix)

  auto add_plan = [&](int order, const std::string& stem, const std::string& gguf_name,
                      const TensorView& t, int permute_heads) {
    const DType out = OutputDType(stem, t, options);
    plans[{order, gguf_name}] = {gguf_name, t.shape,
                                 MakeRowCopy({&t}, out, permute_heads, false, t.name)};
  };

  for (const std::string& name : hf.Names()) {
    if (name.ends_with("rotary_emb.inv_freq")) continue;  // Recomputed, never stored.
    const TensorView& t = hf.Get(name);
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
    const DType out = options.quantize.value_or(group[0]->dtype);
    // The engine needs every routed expert in one dtype, so no per-tensor fallback here.
    Check(out != DType::kQ8_0 || group[0]->cols() % kQ8BlockSize == 0, hf.Describe(),
          ": cannot store routed expert tensor ", group[0]->name, " as q8_0: its rows have ",
          group[0]->cols(), " elements, not a multiple of 32 (q8_0 experts need hidden_size ",
          "and moe_intermediate_size to be multiples of 32)");
    expert_dtype = out;
    plans[{layer, gguf_name}] = {gguf_name, shape, MakeRowCopy(group, out, 0, false, what)};
  }

  GgufWriter w(options.alignment);
  w.Set("general.architecture", GgufValue::String(GgufArchName(config.arch)));
  w.Set("general.name", GgufValue::String(options.name));
  if (!expert_dtype && !plans.empty()) expert_dtype = plans.begin()->second.copy.out_dtype;
  w.Set("general.file_type", GgufValue::U32(FileType(expert_dtype.value_or(DType::kF32))));
  SetArchMetadata(config, w);
  CopyTokenizer(tokenizer, config, w);
  if (config.longrope) {  // llama.cpp's LongRoPE factors: F32 [head_dim / 2], global.
    Check(config.arch == Arch::kPhiMoe, "gguf: LongRoPE is written for phimoe only");
    for (const auto& [name, values] :
         {std::pair{"rope_factors_long.weight", &config.longrope->long_factor},
          std::pair{"rope_factors_short.weight", &config.longrope->short_factor}}) {
      const std::vector<float> data = *values;
      w.AddTensor(name, DType::kF32, {static_cast<int64_t>(data.size())},
                  [data](size_t offset, std::span<std::byte> out) {
                    std::memcpy(out.data(), reinterpret_cast<const std::byte*>(data.data()) + offset,
                                out.size());
                  });
    }
  }
  for (auto& [key, plan] : plans) {
    const RowCopy copy = plan.copy;
    w.AddTensor(plan.gguf_name, copy.out_dtype, plan.shape,
                [copy](size_t offset, std::span<std::byte> out) { copy.Copy(offset, out); });
  }
  w.Write(out_path);
}

}  // namespace moex

#include "model/gguf_model.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "core/name_list.h"
#include "core/quant_format.h"
#include "io/gguf_format.h"
#include "model/arch/family.h"
#include "model/gguf_arch_keys.h"
#include "model/gguf_deepseek2.h"
#include "model/gguf_gpt_oss.h"
#include "model/gguf_llamacpp_keys.h"
#include "model/gguf_tensor_map.h"
#include "model/tensor_names.h"

namespace moex {

using gguf_keys::Key;
using gguf_map::ArchNames;
using gguf_map::HfExpertName;
using gguf_map::IsSuffix;
using gguf_map::kExpsStems;
using gguf_map::kGateUpExpsStem;
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

// ---------------------------------------------------------------------------------------
// The GGUF weight source.

class GgufWeights : public WeightSource {
 public:
  GgufWeights(std::shared_ptr<const GgufFile> file, const ModelConfig& config);

  const TensorView* Find(const std::string& name) const override;
  std::vector<std::string> Names() const override;
  std::string Describe() const override { return file_->path(); }
  void ReleasePages(const TensorView& tensor) const override { file_->ReleasePages(tensor); }
  bool Maps(const TensorView& tensor) const override { return file_->Maps(tensor); }
  std::vector<std::string> Unmapped() const override { return unmapped_; }
  std::string FileName(const std::string& name) const override;

 private:
  struct Entry {
    TensorView view;
    std::optional<RowCopy> unpermute;  // Set for Q/K that need an owned, un-permuted copy.
    // Set for tensors built from others (f32): not the file's, so not among Names().
    std::function<std::vector<float>()> join;
    std::vector<std::byte> owned;
    std::once_flag once;
    std::string file_name;  // The GGUF tensor it comes from.
  };
  Entry& Add(const std::string& hf_name, const TensorView& view);

  std::shared_ptr<const GgufFile> file_;
  std::unordered_map<std::string, std::unique_ptr<Entry>> entries_;
  std::vector<std::string> unmapped_;  // GGUF tensors no HF name maps to.
};

GgufWeights::Entry& GgufWeights::Add(const std::string& hf_name, const TensorView& view) {
  auto entry = std::make_unique<Entry>();
  entry->view = view;
  entry->file_name = view.name;
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
  // Routed experts keep the file's encoding when the kernels can run it as it is: one type
  // for every expert tensor, or block formats throughout with gate and up alike in each
  // layer (Q4_K_M's q4_K gate/up beside q6_K or q4_K down: model/expert_layout.h). Anything
  // else (a block format beside f16, gate and up differing) is dequantised to f32.
  std::set<uint32_t> expert_types;
  std::map<std::string, uint32_t> gate_up_types;  // "layer.gate" / "layer.up" -> type.
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    const std::vector<std::string_view> parts = Split(info.name);
    // Weights only: gpt-oss's expert biases (_exps .bias) are f32 vectors per expert.
    if (parts.size() >= 4 && parts[0] == "blk" && parts.back() == "weight" &&
        (std::find(kExpsStems.begin(), kExpsStems.end(), parts[2]) != kExpsStems.end() ||
         parts[2] == kGateUpExpsStem ||
         (parts.size() == 5 && std::find(kLegacyExpertStems.begin(), kLegacyExpertStems.end(),
                                         parts[2]) != kLegacyExpertStems.end()))) {
      expert_types.insert(info.ggml_type);
      const std::string_view stem = parts[2];
      if (stem == kGateUpExpsStem) {
        gate_up_types[std::string(parts[1]) + ".gate"] = info.ggml_type;
        gate_up_types[std::string(parts[1]) + ".up"] = info.ggml_type;
      } else if (stem.find("down") == std::string_view::npos) {
        gate_up_types[std::string(parts[1]) +
                      (stem.find("gate") != std::string_view::npos ? ".gate" : ".up")] =
            info.ggml_type;
      }
    }
  }
  bool all_blocks = true, gate_up_alike = true;
  int64_t group = 1;  // The record group: the largest block size (expert_layout.h).
  for (uint32_t t : expert_types) {
    const std::optional<QuantFormat> q = QuantFormatOfGgmlType(t);
    const std::optional<DType> dt = q ? std::optional<DType>(DTypeOf(*q)) : DTypeOfGgmlType(t);
    all_blocks = all_blocks && dt && IsBlockQuantized(*dt);
    if (dt) group = std::max<int64_t>(group, DTypeBlockElems(*dt));
  }
  for (const auto& [key, type] : gate_up_types) {
    if (key.ends_with(".gate")) {
      const auto up = gate_up_types.find(key.substr(0, key.size() - 5) + ".up");
      gate_up_alike = gate_up_alike && (up == gate_up_types.end() || up->second == type);
    }
  }
  const bool groups_fit =
      config.moe_intermediate_size % group == 0 && config.hidden_size % group == 0;
  const bool keep_expert_blocks = expert_types.size() == 1 || (all_blocks && gate_up_alike &&
                                                               groups_fit && !expert_types.empty());
  // Their scales are checked when they are packed (PackExpertNeuronMajor), once per pack,
  // not at every open: an offloaded model's experts are then read only from its store.
  const auto expert_tensor = [&](const std::string& name) {
    return keep_expert_blocks ? f.FindQuantizedTensor(name, false) : f.FindTensor(name);
  };
  if (!keep_expert_blocks && expert_types.size() > 1)
    Log(LogLevel::kInfo, f.path(), ": routed experts mix ", expert_types.size(),
        " tensor types the kernels cannot run together",
        !all_blocks      ? " (block formats beside f32/f16/bf16)"
        : !gate_up_alike ? " (gate and up differ)"
                         : " (their largest block does not divide d and F)",
        "; they are dequantised to f32");
  std::map<int, std::array<const TensorView*, 2>> split_kv_b;  // MLA: attn_k_b, attn_v_b.

  for (const GgufTensorInfo& info : f.tensor_infos()) {
    // Read into the config (ModelConfigFromGguf), not weights.
    if (config.longrope &&
        (info.name == "rope_factors_long.weight" || info.name == "rope_factors_short.weight" ||
         info.name == "rope_freqs.weight"))
      continue;
    const std::vector<std::string_view> parts = Split(info.name);
    const std::string suffix(parts.back());
    // Whole-model tensors.
    if (parts.size() == 2 && IsSuffix(suffix)) {
      const auto it = std::find_if(std::begin(kGlobalNames), std::end(kGlobalNames),
                                   [&](const NamePair& p) { return p.gguf == parts[0]; });
      if (it != std::end(kGlobalNames)) {
        Add(it->hf + "." + suffix, *f.FindQuantizedTensor(info.name));
        continue;
      }
    }
    // llama.cpp's ssm_a (Qwen3-Next's -exp(A_log)) has no suffix.
    if (config.delta_net && parts.size() == 3 && parts[0] == "blk" && parts[2] == "ssm_a") {
      if (const std::optional<int> l = ParseIndex(parts[1]); l && *l < config.num_layers) {
        Add(LayerPrefix(*l) + TensorNamesFor(config).gdn_neg_a, *f.FindTensor(info.name));
        continue;
      }
    }
    const std::optional<int> layer =
        parts.size() >= 4 && parts[0] == "blk" ? ParseIndex(parts[1]) : std::nullopt;
    if (!layer || !IsSuffix(suffix)) {
      unmapped_.push_back(info.name);
      continue;
    }
    const std::string stem(parts[2]);
    const int l = *layer;
    if (l >= config.num_layers && l < config.num_layers + config.num_nextn_predict_layers) {
      Log(LogLevel::kDebug, f.path(), ": ignoring multi-token-prediction tensor ", info.name);
      continue;
    }
    Check(l < config.num_layers, f.path(), ": tensor ", info.name, " is beyond block_count ",
          config.num_layers);
    if ((config.mla || config.arch == Arch::kGlm4Moe || config.arch == Arch::kMiniMaxM2) &&
        parts.size() == 4) {
      if (stem == gguf_deepseek2::kGgufRouterBias && suffix == "bias") {
        Add(LayerPrefix(l) + TensorNamesFor(config).router_bias, *f.FindTensor(info.name));
        continue;
      }
      if (config.mla && (stem == "attn_k_b" || stem == "attn_v_b") && suffix == "weight") {
        Entry& e = Add(
            LayerPrefix(l) + (stem == "attn_k_b" ? "self_attn.k_b.weight" : "self_attn.v_b.weight"),
            *f.FindTensor(info.name));
        // [H, rows, cols]; ggml drops a trailing unit dimension, so one head is written 2-D.
        if (e.view.shape.size() == 2) e.view.shape.insert(e.view.shape.begin(), 1);
        split_kv_b[l][stem == "attn_k_b" ? 0 : 1] = &e.view;
        continue;
      }
    }
    if (config.delta_net && parts.size() == 4 && stem == "ssm_dt" && suffix == "bias") {
      Add(LayerPrefix(l) + TensorNamesFor(config).gdn_dt_bias, *f.FindTensor(info.name));
      continue;
    }
    if (config.arch == Arch::kGptOss && parts.size() == 4 && stem == gguf_gpt_oss::kGgufSinks &&
        suffix == "weight") {
      Add(LayerPrefix(l) + gguf_gpt_oss::kHfSinks, *f.FindTensor(info.name));
      continue;
    }
    if (parts.size() == 4) {
      const auto exps = std::find(kExpsStems.begin(), kExpsStems.end(), stem);
      if (exps != kExpsStems.end() && suffix == "scale") {
        // One scale per expert, kept stacked ([E]) under the HF experts' prefix.
        const int mat = static_cast<int>(exps - kExpsStems.begin());
        Add(LayerPrefix(l) + names.expert_prefix + names.expert_mats[mat] + ".scale",
            *f.FindTensor(info.name));
        continue;
      }
      if (exps != kExpsStems.end() && suffix == "weight") {
        const TensorView& t = *expert_tensor(info.name);
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
      if (stem == kGateUpExpsStem && suffix == "weight") {
        // Gate and up fused per expert ([E, 2F, d]: gate rows first, as llama.cpp splits
        // them after one mul_mat_id): two views per expert, no copy.
        const TensorView& t = *expert_tensor(info.name);
        Check(t.shape.size() == 3 && t.shape[0] == config.num_experts && t.shape[1] > 0 &&
                  t.shape[1] % 2 == 0 && t.shape[2] > 0,
              f.path(), ": expert tensor ", info.name, " has shape ", ShapeString(t.shape),
              ", expected [", config.num_experts, ", 2 x rows, cols]");
        const size_t slice = t.nbytes / static_cast<size_t>(t.shape[0]);
        for (int64_t e = 0; e < t.shape[0]; ++e) {
          for (int mat = 0; mat < 2; ++mat) {  // kExpsStems order: gate, up.
            TensorView v = t;
            v.shape = {t.shape[1] / 2, t.shape[2]};
            v.nbytes = slice / 2;
            v.data = t.data + static_cast<size_t>(e) * slice + static_cast<size_t>(mat) * v.nbytes;
            Add(HfExpertName(names, l, static_cast<int>(e), mat), v);
          }
        }
        continue;
      }
      const auto hf = layer_map.find(stem);
      if (hf != layer_map.end()) {
        // Dense weights keep their blocks too: Linear reads every block format.
        const TensorView& t = *f.FindQuantizedTensor(info.name);
        Entry& entry = Add(LayerPrefix(l) + hf->second + "." + suffix, t);
        // llama.cpp declares Qwen2-MoE's shared-expert gate as a vector [d]; the HF tensor
        // (and moex) is the matrix [1, d]: same values.
        if (suffix == "scale") continue;  // A scalar: no reshape, no permutation.
        if (stem == "ffn_gate_inp_shexp" && t.shape.size() == 1) entry.view.shape = {1, t.shape[0]};
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
        Add(HfExpertName(names, l, *expert, mat), *expert_tensor(info.name));
        continue;
      }
    }
    unmapped_.push_back(info.name);
  }
  // llama.cpp's split MLA up-projection, also joined back into HF's kv_b_proj on request
  // (the model runs on the split form; conversions and tests read the joined one).
  for (const auto& [l, pair] : split_kv_b) {
    Check(pair[0] != nullptr && pair[1] != nullptr, f.path(), ": layer ", l,
          " has only one of attn_k_b and attn_v_b");
    const Mla& m = *config.mla;
    TensorView view;
    view.dtype = DType::kF32;
    view.shape = {static_cast<int64_t>(config.num_heads) * (m.qk_nope_head_dim + m.v_head_dim),
                  m.kv_lora_rank};
    view.nbytes = static_cast<size_t>(view.numel()) * sizeof(float);
    Entry& entry = Add(LayerPrefix(l) + "self_attn.kv_b_proj.weight", view);
    const TensorView* k_b = pair[0];
    const TensorView* v_b = pair[1];
    const ModelConfig c = config;
    entry.join = [k_b, v_b, c] { return gguf_deepseek2::JoinKvB(*k_b, *v_b, c); };
  }
}

std::string GgufWeights::FileName(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? name : it->second->file_name;
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
  if (e.join) {
    std::call_once(e.once, [&] {
      const std::vector<float> values = e.join();
      e.owned.resize(values.size() * sizeof(float));
      std::memcpy(e.owned.data(), values.data(), e.owned.size());
      e.view.data = e.owned.data();
    });
  }
  return &e.view;
}

std::vector<std::string> GgufWeights::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_)
    if (!entry->join) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

// ---------------------------------------------------------------------------------------
// Metadata.

constexpr int kMaxExperts = 4096;
constexpr int kMaxLayers = 1024;
constexpr int64_t kMaxLayerExperts = 1 << 18;

using gguf_keys::ToInt;
using gguf_keys::UniformInt;

// llama.cpp computes with the {arch}.* keys it reads for the architecture
// (llamacpp_keys::Reads). Those moex does not implement are accepted only at their neutral
// values (full rotary, a value head as wide as the key head, causal attention, llama.cpp's
// defaults); a key llama.cpp does not read for the architecture cannot change its result
// and is accepted at any value. Anything else fails the load, naming key and value.
void CheckUnreadKeys(const GgufFile& f, const ModelConfig& c, const std::string& arch_name) {
  const char* a = arch_name.c_str();
  auto int_is = [&](const char* key, std::initializer_list<int64_t> neutral, const char* why) {
    if (f.Find(Key(a, key)) == nullptr) return;
    const int64_t v = f.GetInt(Key(a, key));
    Check(std::find(neutral.begin(), neutral.end(), v) != neutral.end(), f.path(), ": ",
          Key(a, key), " = ", v, ": ", why, " is not supported");
  };
  // deepseek2 reads these with llama.cpp's meaning (gguf_deepseek2::ReadConfig).
  if (!c.mla) {
    int_is("rope.dimension_count", {c.RotaryDim()}, "partial rotary embedding");
    int_is("attention.value_length", {c.head_dim}, "a value head size other than key_length");
  }
  if (!c.yarn && !llamacpp_keys::RopeScalingIsNone(f, arch_name)) {
    Fail(f.path(), ": ", Key(a, "rope.scaling.type"), " = ",
         f.GetString(Key(a, "rope.scaling.type"), "linear"), " with ",
         Key(a, "rope.scaling.factor"), " = ", f.GetFloat(Key(a, "rope.scaling.factor"), 0.0),
         ": RoPE scaling is not supported for ", arch_name);
  }
  Check(f.GetBool(Key(a, "attention.causal"), true), f.path(), ": ", Key(a, "attention.causal"),
        " = false: non-causal attention is not supported");
  std::vector<std::string> refused, ignored;
  for (const std::string& key : f.KeysNotLookedUp(arch_name + ".")) {
    const std::string_view suffix = std::string_view(key).substr(arch_name.size() + 1);
    if (!llamacpp_keys::Reads(arch_name, suffix))
      ignored.push_back(key);
    else if (!llamacpp_keys::IsDefault(f, arch_name, suffix))
      refused.push_back(key + " = " + f.Get(key).ToString());
  }
  if (!ignored.empty())
    Log(LogLevel::kDebug, f.path(), ": keys llama.cpp does not read for ", arch_name,
        " (ignored): ", NameList(ignored));
  if (refused.empty()) return;
  Fail(f.path(), ": GGUF key(s) moex does not implement for ", arch_name, ": ", NameList(refused),
       " (llama.cpp computes with them at these values; moex refuses rather than ignore them)");
}

}  // namespace

const char* GgufArchName(Arch arch) {
  return FamilyOf(arch).names().gguf;
}

bool GgufPermutesQK(Arch arch) {
  return FamilyOf(arch).GgufPermutesQK();
}

std::optional<bool> LlamaCppFixedTopKNorm(Arch arch) {
  return FamilyOf(arch).LlamaCppFixedTopKNorm();
}

ModelConfig ModelConfigFromGguf(const GgufFile& f) {
  const std::string arch_name = f.GetString("general.architecture");
  const Family* family = FindGgufFamily(arch_name);
  if (family == nullptr) {
    std::vector<std::string> supported;
    for (const Family* fam : Families())
      if (std::find(supported.begin(), supported.end(), fam->names().gguf) == supported.end())
        supported.emplace_back(fam->names().gguf);
    Fail(f.path(), ": unsupported GGUF architecture '", arch_name,
         "' (supported: ", NameList(supported, supported.size()), ")");
  }
  ModelConfig c;
  c.arch = family->arch();
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
  if (family->GgufFeedForwardIsExpert()) {
    // llama.cpp sizes these experts by feed_forward_length.
    c.moe_intermediate_size = expert_ff > 0 ? expert_ff : ff;
  } else {
    c.moe_intermediate_size = expert_ff;
    c.intermediate_size = ff;
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

  // Families whose llama.cpp graph reads expert_weights_norm read it (their
  // ReadGgufConfig); expert_weights_scale is read only where llama.cpp reads it.
  c.norm_topk_prob = family->LlamaCppFixedTopKNorm().value_or(false);
  // What the tensors say for every family.
  c.tie_word_embeddings = f.FindTensorInfo("output.weight") == nullptr;
  // In any layer: a hybrid model's first layer may have no attention (Qwen3-Next).
  const auto any_layer = [&](const char* tensor) {
    for (int l = 0; l < c.num_layers; ++l)
      if (f.FindTensorInfo("blk." + std::to_string(l) + "." + tensor) != nullptr) return true;
    return false;
  };
  c.attention_bias = any_layer("attn_q.bias");
  c.attention_out_bias = any_layer("attn_output.bias");
  c.lm_head_bias = f.FindTensorInfo("output.bias") != nullptr;
  family->ReadGgufConfig(f, c);
  // MoE layer pattern (Qwen's decoder_sparse_step has no llama.cpp key): from the tensors.
  std::vector<bool> moe(c.num_layers);
  bool any_router = false;
  for (int l = 0; l < c.num_layers; ++l) {
    moe[l] = f.FindTensorInfo("blk." + std::to_string(l) + ".ffn_gate_inp.weight") != nullptr;
    any_router |= moe[l];
  }
  if (any_router) {
    bool found = false;
    for (int freq = 1; freq <= c.num_layers && !found; ++freq) {
      // The family's offset first (Llama 4's interleave: the step's last layer), then each.
      std::vector<int> offsets = {c.moe_layer_offset};
      for (int o = 0; o < freq; ++o) offsets.push_back(o);
      for (const int offset : offsets) {
        bool match = true;
        for (int l = 0; l < c.num_layers && match; ++l)
          match = moe[l] == (l >= c.first_k_dense_replace && (l + offset) % freq == 0);
        if (match) {
          c.moe_layer_freq = freq;
          c.moe_layer_offset = offset;
          found = true;
          break;
        }
      }
    }
  }

  CheckUnreadKeys(f, c, arch_name);

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

}  // namespace moex

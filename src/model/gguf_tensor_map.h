// The tensor mapping the GGUF reader and writer share: HF <-> llama.cpp tensor names per
// architecture, and the row copies that stack experts, apply or undo llama.cpp's Q/K row
// permutation and change dtypes, in pieces (so tensors stream instead of being copied whole).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"

namespace moex::gguf_map {

// HF stems omit "model.layers.{i}." and the ".weight"/".bias" suffix; GGUF stems omit
// "blk.{i}." and the suffix.
struct NamePair {
  std::string hf;
  std::string gguf;
};

inline const NamePair kGlobalNames[] = {
    {"model.embed_tokens", "token_embd"}, {"model.norm", "output_norm"}, {"lm_head", "output"}};

// Routed expert matrices in gate, up, down order.
constexpr std::array<const char*, 3> kExpsStems = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
// Newer converters fuse gate and up: [E, 2F, d], each expert's gate rows before its up rows.
constexpr std::string_view kGateUpExpsStem = "ffn_gate_up_exps";
// Older llama.cpp files store Mixtral experts one by one as blk.{i}.ffn_gate.{e}.weight.
constexpr std::array<const char*, 3> kLegacyExpertStems = {"ffn_gate", "ffn_up", "ffn_down"};

struct ArchNames {
  std::vector<NamePair> layer;
  std::string expert_prefix;               // Followed by "{e}.{matrix}".
  std::array<std::string, 3> expert_mats;  // HF matrix names for gate, up, down.
};

ArchNames NamesFor(Arch arch);

// A layer or expert index without sign or leading zeros; nullopt otherwise.
std::optional<int> ParseIndex(std::string_view s);
// The dot-separated parts of a tensor name.
std::vector<std::string_view> Split(std::string_view s);

// "scale": llama.cpp's optional per-matrix output scale ([1], or [E] for stacked experts).
inline bool IsSuffix(std::string_view s) {
  return s == "weight" || s == "bias" || s == "scale";
}

inline std::string LayerPrefix(int layer) {
  return "model.layers." + std::to_string(layer) + ".";
}

std::string HfExpertName(const ArchNames& n, int layer, int expert, int mat);

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
  // When set (and permute_heads 0), output unit u is source unit (*gather)[u]: a subset of the
  // rows in another order (Qwen3-Next's grouped in_proj_qkvz split into attn_qkv, attn_gate).
  std::shared_ptr<const std::vector<int64_t>> gather;

  // llama.cpp's permute views each head's rows as [2, head_dim/2] and transposes them to
  // [head_dim/2, 2]: GGUF row 2i+j of a head is HF row j*head_dim/2+i.
  int64_t SourceUnit(int64_t u) const {
    if (gather) return (*gather)[static_cast<size_t>(u)];
    if (permute_heads == 0) return u;
    const int64_t hd = total_units / permute_heads;
    const int64_t half = hd / 2;
    const int64_t head = u / hd;
    const int64_t r = u % hd;
    if (!unpermute) return head * hd + (r % 2) * half + r / 2;
    return head * hd + 2 * (r % half) + r / half;
  }

  // Writes the output bytes [offset, offset + out.size()) (whole units).
  void Copy(size_t offset, std::span<std::byte> out) const;
};

// Sets unit geometry for `parts` (identical shapes) with an optional permutation.
RowCopy MakeRowCopy(std::vector<const TensorView*> parts, DType out_dtype, int permute_heads,
                    bool unpermute, const std::string& what);

}  // namespace moex::gguf_map

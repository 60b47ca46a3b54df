#include "model/gguf_tensor_map.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "core/error.h"
#include "kernels/quantize.h"
#include "model/arch/family.h"

namespace moex::gguf_map {

namespace {

const NamePair kCommonLayerNames[] = {
    {"input_layernorm", "attn_norm"},    {"post_attention_layernorm", "ffn_norm"},
    {"self_attn.q_proj", "attn_q"},      {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},      {"self_attn.o_proj", "attn_output"},
    {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
    {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
};

}  // namespace

ArchNames NamesFor(Arch arch) {
  ArchNames n;
  n.layer.assign(std::begin(kCommonLayerNames), std::end(kCommonLayerNames));
  n.expert_prefix = "mlp.experts.";
  n.expert_mats = {"gate_proj", "up_proj", "down_proj"};
  FamilyOf(arch).GgufTensorNames(n);
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

std::string HfExpertName(const ArchNames& n, int layer, int expert, int mat) {
  return LayerPrefix(layer) + n.expert_prefix + std::to_string(expert) + "." + n.expert_mats[mat] +
         ".weight";
}

void RowCopy::Copy(size_t offset, std::span<std::byte> out) const {
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
    const int64_t run =
        permute_heads == 0 && !gather ? std::min(n - k, units_per_part - local) : int64_t{1};
    const std::byte* src = part->data + local * src_unit;
    std::byte* dst = out.data() + k * out_unit;
    if (src_dtype == out_dtype) {
      std::memcpy(dst, src, run * src_unit);
    } else {
      // Widened through a float buffer (`out` has no alignment guarantee); block formats
      // are then quantised row by row, as their blocks run along a row.
      std::vector<float> wide(static_cast<size_t>(run * unit_cols));
      ConvertToF32(src, src_dtype, run * unit_cols, wide.data());
      if (IsBlockQuantized(out_dtype)) {
        for (int64_t r = 0; r < run; ++r)
          kernels::FromF32(wide.data() + r * unit_cols, out_dtype, unit_cols, dst + r * out_unit);
      } else {
        std::memcpy(dst, wide.data(), wide.size() * sizeof(float));
      }
    }
    k += run;
  }
}
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

}  // namespace moex::gguf_map

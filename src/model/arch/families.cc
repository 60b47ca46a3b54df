// The table of families and the pieces several adapters share.
#include <array>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "model/arch/family.h"
#include "model/random_model.h"

namespace moex {

namespace {

// One line per family, in Arch's order.
const std::array<const Family*, 14>& Table() {
  static const std::array<const Family*, 14> table = {
      &MixtralFamily(),   &PhiMoeFamily(),      &Qwen2MoeFamily(),   &Qwen3MoeFamily(),
      &OlmoeFamily(),     &DeepseekMoeFamily(), &DeepseekV2Family(), &DeepseekV3Family(),
      &Glm4MoeFamily(),   &GptOssFamily(),      &MiniMaxM2Family(),  &Qwen3NextFamily(),
      &Qwen35MoeFamily(), &Llama4Family(),
  };
  return table;
}

std::vector<const Family*>& Registered() {
  static std::vector<const Family*> all(Table().begin(), Table().end());
  return all;
}

}  // namespace

std::span<const Family* const> Families() {
  return Registered();
}

FamilyRegistration::FamilyRegistration(const Family& family) {
  const Family::Names& n = family.names();
  for (const Family* f : Families())
    Check(f->arch() != n.arch, "model family ", n.model_type, " reuses the Arch value of ",
          f->names().model_type);
  Check(ParseArchOrNull(n.model_type) == nullptr, "model family ", n.model_type,
        " is already known");
  for (std::string_view alias : n.aliases)
    Check(ParseArchOrNull(alias) == nullptr, "model family ", n.model_type, "'s alias ", alias,
          " is already known");
  Registered().push_back(&family);
}

const Family& FamilyOf(Arch arch) {
  for (const Family* f : Families())
    if (f->arch() == arch) return *f;
  Fail("no model family for architecture #", static_cast<int>(arch));
}

const Family* FindGgufFamily(std::string_view gguf) {
  for (const Family* f : Families())  // deepseek2: V2 first (its reader tells V3 apart).
    if (gguf == f->names().gguf) return f;
  return nullptr;
}

const Family* ParseArchOrNull(std::string_view name) {
  for (const Family* f : Families()) {
    if (name == f->names().model_type) return f;
    for (std::string_view alias : f->names().aliases)
      if (name == alias) return f;
  }
  return nullptr;
}

std::string FamiliesWith(bool (*has)(const Family::Features&)) {
  std::vector<std::string> names;
  for (const Family* f : Families())
    if (has(f->features())) names.emplace_back(f->names().model_type);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

void Family::GgufTensorNames(gguf_map::ArchNames& n) const {
  MlpGateGgufNames(n, nullptr);
}

ModelConfig Family::RandomConfig(ModelSize size) const {
  return ShrinkToSize(PublishedConfig(), size);
}

LongRope Llama3RopeFactors(int head_dim, float theta, double factor, double low_freq_factor,
                           double high_freq_factor, int original) {
  Check(factor > 0 && low_freq_factor > 0 && high_freq_factor >= low_freq_factor && original > 0,
        "config.json: rope_scaling llama3 needs factor > 0, 0 < low_freq_factor <= "
        "high_freq_factor and original_max_position_embeddings > 0");
  const double low_wavelen = original / low_freq_factor;
  const double high_wavelen = original / high_freq_factor;
  LongRope lr;
  for (int i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    const double wavelen = 2 * std::numbers::pi / freq;
    double divisor = 1.0;
    if (wavelen > low_wavelen) {
      divisor = factor;
    } else if (wavelen >= high_wavelen && high_freq_factor > low_freq_factor) {
      const double smooth =
          (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      divisor = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    lr.long_factor.push_back(static_cast<float>(divisor));
  }
  lr.short_factor = lr.long_factor;
  lr.original_max_position_embeddings = original;
  return lr;
}

double LongRopeAttentionFactor(int max_positions, int original) {
  const double factor = static_cast<double>(max_positions) / original;
  return factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(original));
}

ModelConfig BaseConfig(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.rms_norm_eps = 1e-5f;
  c.max_position_embeddings = 4096;
  return c;
}

void MlpGateGgufNames(gguf_map::ArchNames& n, const char* shared_prefix) {
  n.layer.push_back({"mlp.gate", "ffn_gate_inp"});
  if (shared_prefix != nullptr) SharedExpertsGgufNames(n, shared_prefix);
}

void SharedExpertsGgufNames(gguf_map::ArchNames& n, const std::string& prefix) {
  n.layer.push_back({prefix + "gate_proj", "ffn_gate_shexp"});
  n.layer.push_back({prefix + "up_proj", "ffn_up_shexp"});
  n.layer.push_back({prefix + "down_proj", "ffn_down_shexp"});
}

}  // namespace moex

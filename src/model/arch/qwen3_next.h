// The Qwen3-Next adapter (HF Qwen3NextConfig, llama.cpp "qwen3next"), declared here so that its
// sibling Qwen3.5-MoE (qwen3_5_moe.cc) can reuse it: the same Gated DeltaNet, gated attention
// and MoE block, read from other keys and tensor names.
#pragma once

#include <string_view>
#include <vector>

#include "model/arch/family.h"
#include "model/gguf_arch_keys.h"

namespace moex {

// Layer i is Gated DeltaNet unless it is every interval-th (HF's default layer_types).
std::vector<bool> IntervalLayers(int num_layers, int interval);

class Qwen3Next : public Family {
 public:
  Qwen3Next();

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override;
  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override;
  TensorNames HfTensorNames() const override;
  bool GgufFeedForwardIsExpert() const override { return false; }
  std::optional<bool> LlamaCppFixedTopKNorm() const override { return true; }
  std::vector<std::string_view> LlamaCppArchKeys() const override;
  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override;
  void WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const override;
  void GgufTensorNames(gguf_map::ArchNames& n) const override;
  ModelConfig PublishedConfig() const override;
  ModelConfig RandomConfig(ModelSize size) const override;
  void Validate(const ModelConfig& c) const override;

 protected:
  explicit Qwen3Next(Names names);
  gguf_keys::ArchKeys Keys() const { return {names().gguf}; }
  // The keys both families read from config.json (text_config for Qwen3.5): sizes, the
  // DeltaNet, layer_types, partial rotary from `rope` (the object holding
  // partial_rotary_factor and rope_theta).
  void ReadCommonHf(const nlohmann::json& j, const nlohmann::json& rope, ModelConfig& c) const;
  void WriteCommonHf(const ModelConfig& c, nlohmann::json& j) const;
};

}  // namespace moex

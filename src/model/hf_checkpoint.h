// A Hugging Face checkpoint directory: config.json, optional generation_config.json, and
// the weights in model.safetensors or in shards listed by model.safetensors.index.json.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/weight_source.h"
#include "model/hf_quantization.h"
#include "model/model_config.h"

namespace moex {

// Sampling defaults and stop tokens from generation_config.json. Fields the file leaves
// out stay unset; without the file, the token ids come from config.json.
struct GenerationConfig {
  int bos_token_id = -1;
  int pad_token_id = -1;
  std::vector<int> eos_token_ids;
  std::optional<bool> do_sample;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int> max_new_tokens;

  // Throws Error naming the field that has the wrong type.
  static GenerationConfig FromJson(const nlohmann::json& j);
};

class HfCheckpoint : public WeightSource {
 public:
  // Throws Error for a missing directory or config.json, bad JSON, an unsupported model or
  // quantization_config, a missing shard, a tensor listed in the index but absent from its shard,
  // or any invalid safetensors file.
  static std::unique_ptr<HfCheckpoint> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const nlohmann::json& config_json() const { return config_json_; }
  bool has_generation_config() const { return has_generation_config_; }
  const GenerationConfig& generation_config() const { return generation_; }
  // config.json's quantization_config (gpt-oss's MXFP4 experts); nullopt without one.
  const std::optional<HfQuantization>& quantization() const { return quantization_; }
  // The safetensors files in load order.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

  const TensorView* Find(const std::string& name) const override;
  std::vector<std::string> Names() const override;  // Sorted.
  std::string Describe() const override { return dir_; }
  void ReleasePages(const TensorView& tensor) const override {
    for (const auto& f : files_)
      if (f->ReleasePages(tensor)) return;
  }
  bool Maps(const TensorView& tensor) const override {
    for (const auto& f : files_)
      if (f->Maps(tensor)) return true;
    return false;
  }
  // U8 tensors (packed blocks) are not weights: they have no name in Names() and are listed
  // here, unless a reader that unpacks them (WrapGptOssHfWeights) takes them over.
  std::vector<std::string> Unmapped() const override;
  const ByteTensor* FindBytes(const std::string& name) const;

 private:
  HfCheckpoint() = default;
  void LoadWeights();

  std::string dir_;
  nlohmann::json config_json_;
  ModelConfig config_;
  bool has_generation_config_ = false;
  GenerationConfig generation_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const TensorView*> tensors_;
  std::unordered_map<std::string, const ByteTensor*> byte_tensors_;
  std::optional<HfQuantization> quantization_;
};

// Reads and parses a JSON file; throws Error naming the path on I/O or syntax errors.
nlohmann::json ReadJsonFile(const std::string& path);

}  // namespace moex

#include "model/hf_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/input_file.h"

namespace moex {

namespace {

template <typename T>
std::optional<T> OptionalNumber(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if constexpr (std::is_same_v<T, bool>) {
    Check(it->is_boolean(), "generation_config.json: '", key, "' must be true or false");
  } else if constexpr (std::is_integral_v<T>) {
    Check(it->is_number_integer(), "generation_config.json: '", key, "' must be an integer");
  } else {
    Check(it->is_number(), "generation_config.json: '", key, "' must be a number");
  }
  return it->get<T>();
}

std::vector<int> TokenIds(const nlohmann::json& j, const char* key) {
  std::vector<int> ids;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ids;
  auto add = [&](const nlohmann::json& v) {
    Check(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (1ll << 31), "'",
          key, "' must hold non-negative integer token ids");
    ids.push_back(v.get<int>());
  };
  if (it->is_array()) {
    for (const auto& v : *it) add(v);
  } else {
    add(*it);
  }
  return ids;
}

// Shard names come from a file; keep them inside the checkpoint directory.
void CheckShardName(const std::string& index, const std::string& shard) {
  Check(!shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..",
        index, ": invalid shard file name '", shard, "'");
}

}  // namespace

nlohmann::json ReadJsonFile(const std::string& path) {
  const std::string text = ReadInputFile(path, kMaxConfigFileBytes);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Fail(path, ": bad JSON: ", e.what());
  }
}

GenerationConfig GenerationConfig::FromJson(const nlohmann::json& j) {
  Check(j.is_object(), "generation_config.json: top level must be an object");
  GenerationConfig g;
  const auto bos = TokenIds(j, "bos_token_id");
  if (!bos.empty()) g.bos_token_id = bos[0];
  const auto pad = TokenIds(j, "pad_token_id");
  if (!pad.empty()) g.pad_token_id = pad[0];
  g.eos_token_ids = TokenIds(j, "eos_token_id");
  g.do_sample = OptionalNumber<bool>(j, "do_sample");
  g.temperature = OptionalNumber<float>(j, "temperature");
  g.top_p = OptionalNumber<float>(j, "top_p");
  g.top_k = OptionalNumber<int>(j, "top_k");
  g.min_p = OptionalNumber<float>(j, "min_p");
  g.repetition_penalty = OptionalNumber<float>(j, "repetition_penalty");
  g.max_new_tokens = OptionalNumber<int>(j, "max_new_tokens");
  return g;
}

std::unique_ptr<HfCheckpoint> HfCheckpoint::Open(const std::string& dir) {
  struct stat st;
  Check(::stat(dir.c_str(), &st) == 0, "cannot open checkpoint ", dir, ": ", std::strerror(errno));
  Check(S_ISDIR(st.st_mode), "checkpoint ", dir, " is not a directory");
  std::unique_ptr<HfCheckpoint> ckpt(new HfCheckpoint());
  ckpt->dir_ = dir;
  const std::string config_path = dir + "/config.json";
  Check(RegularFileExists(config_path), "checkpoint ", dir, " has no config.json");
  ckpt->config_json_ = ReadJsonFile(config_path);
  try {
    ckpt->config_ = ModelConfig::FromHfJson(ckpt->config_json_);
    ckpt->quantization_ = ParseHfQuantization(ckpt->config_json_, ckpt->config_.arch);
  } catch (const Error& e) {
    Fail(config_path, ": ", e.what());
  }

  const std::string gen_path = dir + "/generation_config.json";
  if (RegularFileExists(gen_path)) {
    ckpt->has_generation_config_ = true;
    try {
      ckpt->generation_ = GenerationConfig::FromJson(ReadJsonFile(gen_path));
    } catch (const Error& e) {
      Fail(gen_path, ": ", e.what());
    }
  }
  GenerationConfig& g = ckpt->generation_;
  if (g.bos_token_id < 0) g.bos_token_id = ckpt->config_.bos_token_id;
  if (g.eos_token_ids.empty()) g.eos_token_ids = ckpt->config_.eos_token_ids;

  ckpt->LoadWeights();
  return ckpt;
}

void HfCheckpoint::LoadWeights() {
  const std::string index_path = dir_ + "/model.safetensors.index.json";
  const std::string single_path = dir_ + "/model.safetensors";
  auto add_file = [&](const std::string& path) -> const SafetensorsFile& {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    for (const TensorView& t : files_.back()->tensors()) {
      const bool inserted = tensors_.emplace(t.name, &t).second && !byte_tensors_.contains(t.name);
      Check(inserted, dir_, ": tensor '", t.name, "' appears in more than one file (again in ",
            path, ")");
    }
    for (const ByteTensor& t : files_.back()->byte_tensors()) {
      const bool inserted = byte_tensors_.emplace(t.name, &t).second && !tensors_.contains(t.name);
      Check(inserted, dir_, ": tensor '", t.name, "' appears in more than one file (again in ",
            path, ")");
    }
    return *files_.back();
  };

  if (!RegularFileExists(index_path)) {
    Check(RegularFileExists(single_path), "checkpoint ", dir_,
          " has neither model.safetensors nor model.safetensors.index.json");
    add_file(single_path);
    return;
  }
  const nlohmann::json index = ReadJsonFile(index_path);
  auto wm = index.is_object() ? index.find("weight_map") : index.end();
  Check(index.is_object() && wm != index.end() && wm->is_object(), index_path,
        ": missing 'weight_map' object");
  // Open each shard once, in order of first mention.
  std::unordered_map<std::string, const SafetensorsFile*> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    Check(it.value().is_string(), index_path, ": weight_map entry for '", it.key(),
          "' must be a file name");
    const std::string shard = it.value().get<std::string>();
    CheckShardName(index_path, shard);
    if (shards.contains(shard)) continue;
    const std::string path = dir_ + "/" + shard;
    Check(RegularFileExists(path), index_path, " lists shard ", shard, ", which is missing from ", dir_);
    shards[shard] = &add_file(path);
  }
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    const std::string shard = it.value().get<std::string>();
    Check(shards[shard]->Find(it.key()) != nullptr || shards[shard]->FindBytes(it.key()) != nullptr,
          index_path, " lists tensor '", it.key(), "' in ", shard,
          ", but that shard does not contain it");
  }
}

const TensorView* HfCheckpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

const ByteTensor* HfCheckpoint::FindBytes(const std::string& name) const {
  auto it = byte_tensors_.find(name);
  return it == byte_tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> HfCheckpoint::Unmapped() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : byte_tensors_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> HfCheckpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace moex

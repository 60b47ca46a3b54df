#include "support/tiny_models.h"

#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/random_model.h"
#include "support/temp_dir.h"

namespace moex::testing {

namespace {

std::string WriteOnce(Arch arch, DType dtype, uint64_t seed, int expert_neurons) {
  static std::mutex mutex;
  static TempDir* root = new TempDir();  // Lives for the whole test process.
  static std::map<std::tuple<Arch, DType, uint64_t, int>, std::string> written;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_tuple(arch, dtype, seed, expert_neurons);
  if (auto it = written.find(key); it != written.end()) return it->second;
  RandomModelOptions options;
  options.config = RandomModelConfig(arch, ModelSize::kTiny);
  if (expert_neurons > 0) {
    // Shared experts keep their count (DeepSeek sizes them as n_shared x expert width).
    ModelConfig& c = options.config;
    c.shared_expert_intermediate_size =
        c.shared_expert_intermediate_size / c.moe_intermediate_size * expert_neurons;
    c.moe_intermediate_size = expert_neurons;
  }
  options.dtype = dtype;
  options.seed = seed;
  options.out = *root / (std::string(ArchName(arch)) + "-" + DTypeName(dtype) + "-" +
                         std::to_string(seed) + "-" + std::to_string(expert_neurons));
  WriteRandomModel(options);
  written[key] = options.out;
  return options.out;
}

}  // namespace

std::string TinyModelPath(Arch arch, DType dtype, uint64_t seed) {
  return WriteOnce(arch, dtype, seed, 0);
}

std::string ChunkedTinyModelPath(Arch arch) {
  return WriteOnce(arch, DType::kBF16, 7, kChunkedExpertNeurons);
}

namespace {

// The olmoe tiny shape widened to whole 256-blocks, written as a quantized GGUF once per
// process; `q4_k_m` asks for llama-quantize's Q4_K_M mix over `layers` layers.
std::string WriteQuantOnce(DType type, bool q4_k_m, int layers) {
  static std::mutex mutex;
  static TempDir* root = new TempDir();
  static std::map<std::tuple<DType, bool, int>, std::string> written;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(type, q4_k_m, layers);
  if (auto it = written.find(key); it != written.end()) return it->second;
  RandomModelOptions options;
  options.config = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  ModelConfig& c = options.config;
  c.hidden_size = 256;
  c.head_dim = 64;
  c.num_layers = layers;
  c.moe_intermediate_size = 512;
  options.dtype = DType::kBF16;
  options.seed = 7;
  options.format = "gguf";
  options.gguf_type = type;
  options.gguf_q4_k_m = q4_k_m;
  options.out = *root / (std::string("olmoe-") + (q4_k_m ? "q4_k_m" : DTypeName(type)) + "-" +
                         std::to_string(layers) + ".gguf");
  WriteRandomModel(options);
  written[key] = options.out;
  return options.out;
}

}  // namespace

std::string TinyQuantModelPath(DType type) {
  return WriteQuantOnce(type, false, 2);
}

std::string TinyQ4KMModelPath() {
  return WriteQuantOnce(DType::kQ4_K, true, 3);
}

void PoisonTensorWithNaN(const std::string& file, const std::string& name) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const auto j = nlohmann::json::parse(header);
  Check(j.at(name).at("dtype") == "F32", "PoisonTensorWithNaN: ", name, " is not f32");
  const uint64_t begin = j[name]["data_offsets"][0], end = j[name]["data_offsets"][1];
  const float nan = std::numeric_limits<float>::quiet_NaN();
  f.seekp(static_cast<std::streamoff>(8 + header_len + begin));
  for (uint64_t at = begin; at < end; at += 4) f.write(reinterpret_cast<const char*>(&nan), 4);
}

}  // namespace moex::testing

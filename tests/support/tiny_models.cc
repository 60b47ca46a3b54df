#include "support/tiny_models.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

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

}  // namespace moex::testing

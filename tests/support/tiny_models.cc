#include "support/tiny_models.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "model/random_model.h"
#include "support/temp_dir.h"

namespace moex::testing {

std::string TinyModelPath(Arch arch, DType dtype, uint64_t seed) {
  static std::mutex mutex;
  static TempDir* root = new TempDir();  // Lives for the whole test process.
  static std::map<std::tuple<Arch, DType, uint64_t>, std::string> written;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_tuple(arch, dtype, seed);
  if (auto it = written.find(key); it != written.end()) return it->second;
  RandomModelOptions options;
  options.config = RandomModelConfig(arch, ModelSize::kTiny);
  options.dtype = dtype;
  options.seed = seed;
  options.out = *root / (std::string(ArchName(arch)) + "-" + DTypeName(dtype) + "-" +
                         std::to_string(seed));
  WriteRandomModel(options);
  written[key] = options.out;
  return options.out;
}

}  // namespace moex::testing

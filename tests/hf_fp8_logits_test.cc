// Block-scaled FP8 HF checkpoints (model/hf_fp8.h) compute as their dequantized bf16 twin:
// resident and offloaded, bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/moe_executor.h"
#include "io/safetensors_writer.h"
#include "model/hf_fp8.h"
#include "model/model.h"
#include "model/random_model.h"
#include "support/engine_runs.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

// A tiny checkpoint with FP8 weights in 16 x 16 blocks (several per matrix).
std::string WriteFp8Model(const fs::path& dir, Arch arch) {
  RandomModelOptions o;
  o.config = RandomModelConfig(arch, ModelSize::kTiny);
  o.seed = 3;
  o.hf_fp8_block = 16;
  o.out = (dir / "fp8").string();
  WriteRandomModel(o);
  return o.out;
}

std::vector<float> Logits(const Model& model) {
  ResidentMoeExecutor executor(model);
  return testing::PrefillLogits(model, executor, {1, 17, 300, 42, 42, 511, 0, 99, 256, 7});
}

class HfFp8Logits : public ::testing::TestWithParam<Arch> {};

// The FP8 checkpoint computes as its dequantized bf16 twin, bit for bit, resident and
// offloaded (packing frees each converted copy and converts again when asked). MiniMax-M2:
// DeepSeek-V3's layout; Qwen3.5: under model.language_model., the routed experts one by one
// (as Qwen's FP8 releases store them, where its bf16 ones fuse them).
TEST_P(HfFp8Logits, LogitsOfTheDequantizedModelResidentAndOffloaded) {
  testing::TempDir temp;
  const std::string dir = WriteFp8Model(temp.path(), GetParam());
  const auto fp8 = LoadModel(dir);
  // The twin: every tensor as the FP8 source presents it, without quantization_config.
  const std::string twin = (temp.path() / "twin").string();
  fs::create_directories(twin);
  {
    auto source = WrapFp8HfWeights(HfCheckpoint::Open(dir));
    SafetensorsWriter writer;
    std::vector<std::vector<std::byte>> copies;
    for (const std::string& name : source->Names()) {
      const TensorView& t = *source->Find(name);
      copies.emplace_back(t.data, t.data + t.nbytes);
      writer.Add(name, t.dtype, t.shape, copies.back().data());
    }
    writer.WriteCheckpoint(twin);
    nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
    config.erase("quantization_config");
    std::ofstream(twin + "/config.json") << config.dump();
  }
  const auto plain = LoadModel(twin);
  const std::vector<float> logits = Logits(*fp8);
  EXPECT_EQ(logits, Logits(*plain));
  EXPECT_EQ(
      testing::OffloadedPrefillLogits(*LoadModel(dir), {1, 17, 300, 42, 42, 511, 0, 99, 256, 7},
                                      temp / "experts.moex", "25%"),
      logits);
}

INSTANTIATE_TEST_SUITE_P(Archs, HfFp8Logits, ::testing::Values(Arch::kMiniMaxM2, Arch::kQwen35Moe),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

}  // namespace
}  // namespace moex

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

// A tiny MiniMax-M2 checkpoint with FP8 weights in 16 x 16 blocks (several per matrix).
std::string WriteFp8Model(const fs::path& dir) {
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kMiniMaxM2, ModelSize::kTiny);
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

// The FP8 checkpoint computes as its dequantized bf16 twin, bit for bit, resident and
// offloaded (packing frees each converted copy and converts again when asked).
TEST(HfFp8, LogitsOfTheDequantizedModelResidentAndOffloaded) {
  testing::TempDir temp;
  const std::string dir = WriteFp8Model(temp.path());
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

}  // namespace
}  // namespace moex

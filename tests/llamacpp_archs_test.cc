// llama.cpp's own toy models (tests/test-llama-archs -o: one tiny MoE GGUF per architecture,
// written by llama.cpp's saver with every hyperparameter it has) load in moex and give
// llama.cpp's logits. The files are rebuilt here from their heads and llama.cpp's weight
// recipe; llama.cpp's logits are fixtures (tests/data/llamacpp-archs, written by
// bench/llamacpp/arch_fixtures.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/moe_executor.h"
#include "io/gguf_file.h"
#include "io/gguf_format.h"
#include "model/model.h"
#include "support/engine_runs.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

// The architectures moex reads, by llama.cpp's name (test-llama-archs writes "{name}-moe.gguf").
const std::vector<std::string> kArchs = {"llama",    "olmoe",      "qwen2moe",  "qwen3moe",
                                         "deepseek", "deepseek2",  "phimoe",    "glm4moe",
                                         "gpt-oss",  "minimax-m2", "qwen3next", "qwen35moe", "llama4"};

fs::path FixtureDir() {
  return testing::SourceDir() / "tests" / "data" / "llamacpp-archs";
}

nlohmann::json Manifest() {
  std::ifstream in(FixtureDir() / "manifest.json");
  return nlohmann::json::parse(in);
}

std::vector<char> ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<float> ReadFloats(const fs::path& path) {
  const std::vector<char> bytes = ReadBytes(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// llama.cpp's tests/test-llama-archs.cpp set_tensor_data for f32 tensors: a Mersenne
// twister seeded with seed ^ std::hash of the name, normal values (Mamba's ssm_a negative).
std::vector<float> ToyTensor(const std::string& name, int64_t n, size_t seed, float stdev) {
  std::mt19937 gen(seed ^ std::hash<std::string>{}(name));
  std::normal_distribution<float> dis(0.0f, stdev);
  const bool ssm_a = name.find("ssm_a") != std::string::npos;
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) {
    const float x = dis(gen);
    v = ssm_a ? -std::fabs(x) : x;
  }
  return values;
}

// The toy file of `arch` at `path`: its head, then every tensor from llama.cpp's recipe;
// checks the first and last value of each against the bits the manifest recorded.
void RebuildToyFile(const std::string& arch, const nlohmann::json& manifest, const fs::path& path) {
  const nlohmann::json& entry = manifest["files"][arch];
  {
    const std::vector<char> head = ReadBytes(FixtureDir() / (arch + ".head"));
    ASSERT_FALSE(head.empty()) << arch << ".head";
    std::ofstream out(path, std::ios::binary);
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
  }
  fs::resize_file(path, entry["bytes"].get<uint64_t>());
  std::vector<GgufTensorInfo> infos;
  uint64_t data_offset = 0;
  {
    GgufFile f(path.string());
    infos = f.tensor_infos();
    data_offset = f.data_offset();
  }
  const auto seed = manifest["seed"].get<size_t>();
  const auto stdev = manifest["stdev"].get<float>();
  const nlohmann::json& probes = entry["probes"];
  ASSERT_EQ(probes.size(), infos.size());
  std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
  for (size_t i = 0; i < infos.size(); ++i) {
    const GgufTensorInfo& t = infos[i];
    ASSERT_EQ(t.ggml_type, 0u) << t.name << ": the toy files are f32";
    int64_t n = 1;
    for (const int64_t d : t.ne) n *= d;
    const std::vector<float> values = ToyTensor(t.name, n, seed, stdev);
    ASSERT_EQ(probes[i][0].get<std::string>(), t.name);
    char first[9], last[9];
    std::snprintf(first, sizeof first, "%08x", Bits(values.front()));
    std::snprintf(last, sizeof last, "%08x", Bits(values.back()));
    ASSERT_EQ(probes[i][1].get<std::string>(), first)
        << t.name << ": the weights differ from llama.cpp's (another standard library?)";
    ASSERT_EQ(probes[i][2].get<std::string>(), last) << t.name;
    out.seekp(static_cast<std::streamoff>(data_offset + t.offset));
    out.write(reinterpret_cast<const char*>(values.data()),
              static_cast<std::streamsize>(values.size() * sizeof(float)));
  }
  ASSERT_TRUE(out.good());
}

// Normalised mean squared error of `b` against the reference `a` (llama.cpp's own measure
// in test-llama-archs).
double Nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(a[i]) * a[i];
  }
  return err / ref;
}

// Agreement with llama.cpp: NMSE below 1e-10 (float32 rounding of two different kernel
// orders gives ~1e-14 here), and the same top token wherever llama.cpp's top two differ
// by more than 1e-4.
void ExpectLlamaCppLogits(const std::vector<float>& expected, const std::vector<float>& got,
                          int vocab) {
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_LT(Nmse(expected, got), 1e-10);
  for (size_t row = 0; row * vocab < expected.size(); ++row) {
    const auto e = expected.begin() + static_cast<std::ptrdiff_t>(row * vocab);
    const auto g = got.begin() + static_cast<std::ptrdiff_t>(row * vocab);
    std::vector<float> sorted(e, e + vocab);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] <= 1e-4f) continue;
    EXPECT_EQ(std::max_element(e, e + vocab) - e, std::max_element(g, g + vocab) - g)
        << "position " << row;
  }
}

class LlamaCppArchsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppArchsTest, LoadsAndGivesLlamaCppLogits) {
  const std::string arch = GetParam();
  const nlohmann::json manifest = Manifest();
  ASSERT_TRUE(manifest["files"].contains(arch)) << "no fixture for " << arch;
  testing::TempDir dir;
  const fs::path path = dir.path() / (arch + "-moe.gguf");
  RebuildToyFile(arch, manifest, path);
  if (HasFatalFailure()) return;
  const auto ids = manifest["ids"].get<std::vector<int32_t>>();
  const int vocab = manifest["files"][arch]["vocab"].get<int>();
  const std::vector<float> expected = ReadFloats(FixtureDir() / (arch + ".logits"));

  const std::unique_ptr<Model> model = LoadModel(path.string());
  ResidentMoeExecutor resident(*model);
  const std::vector<float> logits = testing::PrefillLogits(*model, resident, ids);
  if (arch == "phimoe") {
    // llama.cpp computes Phi-3.5-MoE unlike HF in three places (RMSNorm plus bias for
    // LayerNorm, softmax top-2 for sparsemixer, one LongRoPE attention factor); moex follows
    // HF (docs/formats.md, "Checked against llama.cpp"). Agreement here would mean llama.cpp
    // changed: then the docs and this test change with it.
    EXPECT_GT(Nmse(expected, logits), 1e-6);
  } else {
    ExpectLlamaCppLogits(expected, logits, vocab);
  }
  // Offloaded with a quarter of the experts' bytes in the host cache: the same bits.
  EXPECT_EQ(testing::OffloadedPrefillLogits(*model, ids, dir / "experts.moex", "25%"), logits);
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, LlamaCppArchsTest, ::testing::ValuesIn(kArchs),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The fixtures hold exactly the architectures tested above.
TEST(LlamaCppArchs, FixturesCoverEveryArchitecture) {
  const nlohmann::json manifest = Manifest();
  std::vector<std::string> fixtures;
  for (const auto& [arch, entry] : manifest["files"].items()) fixtures.push_back(arch);
  std::vector<std::string> archs = kArchs;
  std::sort(archs.begin(), archs.end());
  std::sort(fixtures.begin(), fixtures.end());
  EXPECT_EQ(fixtures, archs);
}

}  // namespace
}  // namespace moex

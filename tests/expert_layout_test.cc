// The neuron-major packing, on a hand-written expert (docs/design.md, "The expert layout").
#include "model/expert_layout.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"

namespace moex {
namespace {

TensorView View(const char* name, std::vector<int64_t> shape, const std::vector<float>& v) {
  TensorView t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data = reinterpret_cast<const std::byte*>(v.data());
  t.nbytes = v.size() * sizeof(float);
  return t;
}

TEST(ExpertLayoutTest, RecordIsGateRowUpRowDownColumn) {
  // d = 3 hidden, F = 2 neurons.
  const std::vector<float> gate = {1, 2, 3, 4, 5, 6};        // [2, 3]
  const std::vector<float> up = {7, 8, 9, 10, 11, 12};       // [2, 3]
  const std::vector<float> down = {13, 14, 15, 16, 17, 18};  // [3, 2]: column 0 = 13 15 17
  const ExpertShape shape = ExpertShape::Uniform(DType::kF32, 3, 2);
  std::vector<float> packed(shape.ExpertBytes() / sizeof(float));
  PackExpertNeuronMajor(View("g", {2, 3}, gate), View("u", {2, 3}, up), View("d", {3, 2}, down),
                        shape, reinterpret_cast<std::byte*>(packed.data()));
  const std::vector<float> expected = {1, 2, 3, 7, 8, 9,   13, 15, 17,   // neuron 0
                                       4, 5, 6, 10, 11, 12, 14, 16, 18};  // neuron 1
  EXPECT_EQ(packed, expected);
}

TEST(ExpertLayoutTest, LargerThanOneTransposeBlock) {
  const int64_t d = 5, f = 150;  // F spans three 64-neuron blocks, the last one partial.
  std::vector<float> gate(static_cast<size_t>(f * d)), up(gate.size()), down(gate.size());
  for (size_t k = 0; k < gate.size(); ++k) {
    gate[k] = static_cast<float>(k);
    up[k] = -static_cast<float>(k);
    down[k] = static_cast<float>(k) + 0.5f;
  }
  const ExpertShape shape = ExpertShape::Uniform(DType::kF32, d, f);
  std::vector<float> packed(shape.ExpertBytes() / sizeof(float));
  PackExpertNeuronMajor(View("g", {f, d}, gate), View("u", {f, d}, up), View("d", {d, f}, down),
                        shape, reinterpret_cast<std::byte*>(packed.data()));
  for (int64_t i = 0; i < f; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const float* rec = &packed[static_cast<size_t>(i * 3 * d)];
      ASSERT_EQ(rec[j], gate[static_cast<size_t>(i * d + j)]);
      ASSERT_EQ(rec[d + j], up[static_cast<size_t>(i * d + j)]);
      ASSERT_EQ(rec[2 * d + j], down[static_cast<size_t>(j * f + i)]) << i << "," << j;
    }
}

TEST(ExpertLayoutTest, MisshapenTensorsAreRejectedByName) {
  const std::vector<float> v(6, 0.0f);
  const ExpertShape shape = ExpertShape::Uniform(DType::kF32, 3, 2);
  try {
    CheckExpertTensors(View("g", {2, 3}, v), View("u", {2, 3}, v), View("down_proj", {2, 3}, v),
                       shape);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("down_proj"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moex

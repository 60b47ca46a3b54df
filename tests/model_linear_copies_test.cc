// The model's own copies of its file-mapped Linear weights (model.cc, CopyLinearWeights):
// the same bytes as the file's tensor, no longer in the file's mapping (so on huge pages and
// with the file's pages released); memory a source owns (llama.cpp's permuted Q/K, un-permuted
// into a copy at load) is used as it is, not copied twice; a tensor used twice is copied once.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "kernels/activation_precision.h"
#include "model/model.h"
#include "model/random_model.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

// True when `t` is the model's copy of the source's tensor `name`, byte for byte.
void ExpectCopyOf(const Model& model, const TensorView* t, const std::string& name) {
  ASSERT_NE(t, nullptr) << name;
  const TensorView& file = model.weights->Get(name);
  EXPECT_TRUE(model.weights->Maps(file)) << name;
  EXPECT_FALSE(model.weights->Maps(*t)) << name << " still points into the file";
  ASSERT_EQ(t->nbytes, file.nbytes) << name;
  EXPECT_EQ(std::memcmp(t->data, file.data, file.nbytes), 0) << name;
  bool owned_by_model = false;
  for (const AlignedBuffer& b : model.linear_bytes) owned_by_model |= b.data() == t->data;
  EXPECT_TRUE(owned_by_model) << name;
}

TEST(ModelLinearCopies, SafetensorsWeightsAreCopiedByteForByte) {
  const auto model = LoadModel(testing::TinyModelPath(Arch::kOlmoe));
  ExpectCopyOf(*model, model->layers[0].q, "model.layers.0.self_attn.q_proj.weight");
  ExpectCopyOf(*model, model->layers[1].o, "model.layers.1.self_attn.o_proj.weight");
  ExpectCopyOf(*model, model->layers[0].router, "model.layers.0.mlp.gate.weight");
  ExpectCopyOf(*model, model->lm_head, "lm_head.weight");
}

TEST(ModelLinearCopies, GgufBlocksAreCopiedAsStoredWithF32Activations) {
  const kernels::ScopedActivationPrecision f32(kernels::ActivationPrecision::kF32);
  const auto model = LoadModel(testing::TinyQuantModelPath(DType::kQ4_K));
  ASSERT_EQ(model->layers[0].o->dtype, DType::kQ4_K);
  ExpectCopyOf(*model, model->layers[0].o, "model.layers.0.self_attn.o_proj.weight");
  ExpectCopyOf(*model, model->layers[0].q, "model.layers.0.self_attn.q_proj.weight");
}

TEST(ModelLinearCopies, OwnedUnpermutedQueryIsNotCopiedAgain) {
  const testing::TempDir dir;
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kMixtral, ModelSize::kTiny);
  o.dtype = DType::kF32;
  o.seed = 3;
  o.format = "gguf";
  o.out = dir / "mixtral.gguf";
  WriteRandomModel(o);
  const auto model = LoadModel(o.out);
  // llama.cpp stores Mixtral's Q and K permuted; the reader un-permutes them into memory it
  // owns, which the model uses directly.
  const TensorView& q = model->weights->Get("model.layers.0.self_attn.q_proj.weight");
  EXPECT_FALSE(model->weights->Maps(q));
  EXPECT_EQ(model->layers[0].q, &q);
  ExpectCopyOf(*model, model->layers[0].o, "model.layers.0.self_attn.o_proj.weight");
}

}  // namespace
}  // namespace moex

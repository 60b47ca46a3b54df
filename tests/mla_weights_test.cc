// LoadMlaWeights: the absorbed attention's per-head halves of kv_b_proj (k_up [L, nope] and
// v_up [v, L] per head) hold kv_b's values, in the file's own bytes where the layout allows
// (llama.cpp's attn_k_b / attn_v_b; kv_b's v rows) and in a transposed copy otherwise.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/quantize.h"
#include "model/arch/family.h"
#include "model/mla_weights.h"
#include "model/model.h"
#include "model/tensor_names.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

// A model's weights with some tensors replaced, added or hidden.
class OverlayWeights : public WeightSource {
 public:
  explicit OverlayWeights(const WeightSource& base) : base_(base) {}
  void Put(const std::string& name, DType dtype, std::vector<int64_t> shape,
           std::vector<std::byte> bytes) {
    auto& buf = buffers_[name];
    buf = std::move(bytes);
    TensorView t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.nbytes = buf.size();
    t.data = buf.data();
    views_[name] = t;
  }
  void Hide(const std::string& name) { hidden_.push_back(name); }
  const TensorView* Find(const std::string& name) const override {
    for (const std::string& h : hidden_)
      if (h == name) return nullptr;
    const auto it = views_.find(name);
    return it != views_.end() ? &it->second : base_.Find(name);
  }
  std::vector<std::string> Names() const override { return base_.Names(); }
  std::string Describe() const override { return "overlay"; }

 private:
  const WeightSource& base_;
  std::map<std::string, std::vector<std::byte>> buffers_;
  std::map<std::string, TensorView> views_;
  std::vector<std::string> hidden_;
};

std::vector<std::byte> Encode(const std::vector<float>& values, DType dtype) {
  std::vector<std::byte> out(DTypeBytes(dtype, static_cast<int64_t>(values.size())));
  kernels::FromF32(values.data(), dtype, static_cast<int64_t>(values.size()), out.data());
  return out;
}

std::vector<float> HeadValues(const MlaHeads& m, int64_t h) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  ConvertToF32(m.Head(h), m.dtype, m.rows * m.cols, out.data());
  return out;
}

class MlaWeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = LoadModel(testing::TinyModelPath(Arch::kDeepseekV2));
    const ModelConfig& c = model_->config;
    const Mla& m = *c.mla;
    H = c.num_heads;
    nope = m.qk_nope_head_dim;
    v = m.v_head_dim;
    lat = m.kv_lora_rank;
    kv_b_name = TensorNames::Layer(0, names.kv_b);
    kv_b = TensorToF32(model_->weights->Get(kv_b_name));
  }
  // kv_b's k_nope value for (head, latent, j) and v's for (head, i, latent).
  float K(int64_t h, int64_t l, int64_t j) const {
    return kv_b[static_cast<size_t>((h * (nope + v) + j) * lat + l)];
  }
  float V(int64_t h, int64_t i, int64_t l) const {
    return kv_b[static_cast<size_t>((h * (nope + v) + nope + i) * lat + l)];
  }
  void ExpectHalves(const LayerWeights& L) const {
    ASSERT_EQ(L.mla_k_up.rows, lat);
    ASSERT_EQ(L.mla_k_up.cols, nope);
    ASSERT_EQ(L.mla_v_up.rows, v);
    ASSERT_EQ(L.mla_v_up.cols, lat);
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<float> k = HeadValues(L.mla_k_up, h), vv = HeadValues(L.mla_v_up, h);
      for (int64_t l = 0; l < lat; ++l)
        for (int64_t j = 0; j < nope; ++j) ASSERT_EQ(k[l * nope + j], K(h, l, j)) << h << " " << l;
      for (int64_t i = 0; i < v; ++i)
        for (int64_t l = 0; l < lat; ++l) ASSERT_EQ(vv[i * lat + l], V(h, i, l)) << h << " " << i;
    }
  }

  std::unique_ptr<Model> model_;
  TensorNames names = DeepseekV2Family().HfTensorNames();
  int64_t H = 0, nope = 0, v = 0, lat = 0;
  std::string kv_b_name;
  std::vector<float> kv_b;
};

TEST_F(MlaWeightsTest, Bf16KvBGivesATransposedBf16KAndVInPlace) {
  LayerWeights L;
  LoadMlaWeights(*model_->weights, names, model_->config, 0, L);
  ExpectHalves(L);
  const TensorView& t = model_->weights->Get(kv_b_name);
  EXPECT_EQ(L.mla_k_up.dtype, DType::kBF16);
  EXPECT_FALSE(L.mla_k_up.owned.empty());
  EXPECT_EQ(L.mla_v_up.dtype, DType::kBF16);
  EXPECT_TRUE(L.mla_v_up.owned.empty());
  EXPECT_EQ(L.mla_v_up.Head(0), t.data + t.row_bytes() * static_cast<size_t>(nope));
}

TEST_F(MlaWeightsTest, BlockQuantizedKvBGivesDequantisedKAndVInPlace) {
  // A q8_0 kv_b (older llama.cpp files store one attn_kv_b): k's transposition cannot move
  // blocks, so it is widened to f32; v's rows are whole blocks and stay in the file.
  OverlayWeights w(*model_->weights);
  w.Put(kv_b_name, DType::kQ8_0, {H * (nope + v), lat}, Encode(kv_b, DType::kQ8_0));
  kv_b = TensorToF32(w.Get(kv_b_name));  // The q8_0 values.
  LayerWeights L;
  LoadMlaWeights(w, names, model_->config, 0, L);
  ExpectHalves(L);
  EXPECT_EQ(L.mla_k_up.dtype, DType::kF32);
  EXPECT_EQ(L.mla_v_up.dtype, DType::kQ8_0);
  EXPECT_TRUE(L.mla_v_up.owned.empty());
}

TEST_F(MlaWeightsTest, SplitKBAndVBAreUsedAsStored) {
  std::vector<float> k_b, v_b;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t l = 0; l < lat; ++l)
      for (int64_t j = 0; j < nope; ++j) k_b.push_back(K(h, l, j));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < v; ++i)
      for (int64_t l = 0; l < lat; ++l) v_b.push_back(V(h, i, l));
  OverlayWeights w(*model_->weights);
  w.Hide(kv_b_name);
  w.Put(TensorNames::Layer(0, names.k_b), DType::kF32, {H, lat, nope}, Encode(k_b, DType::kF32));
  w.Put(TensorNames::Layer(0, names.v_b), DType::kF32, {H, v, lat}, Encode(v_b, DType::kF32));
  LayerWeights L;
  LoadMlaWeights(w, names, model_->config, 0, L);
  ExpectHalves(L);
  EXPECT_EQ(L.mla_k_up.Head(0), w.Get(TensorNames::Layer(0, names.k_b)).data);
  EXPECT_EQ(L.mla_v_up.Head(0), w.Get(TensorNames::Layer(0, names.v_b)).data);
  EXPECT_EQ(L.mla_k_up.head_bytes, static_cast<size_t>(lat * nope) * sizeof(float));
}

TEST_F(MlaWeightsTest, OneSplitHalfAloneIsRefused) {
  OverlayWeights w(*model_->weights);
  w.Put(TensorNames::Layer(0, names.k_b), DType::kF32, {H, lat, nope},
        std::vector<std::byte>(static_cast<size_t>(H * lat * nope) * sizeof(float)));
  LayerWeights L;
  try {
    LoadMlaWeights(w, names, model_->config, 0, L);
    ADD_FAILURE() << "k_b without v_b loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only one of attn_k_b and attn_v_b"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace moex

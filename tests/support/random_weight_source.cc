#include "support/random_weight_source.h"

#include <cstring>

#include "model/expert_store_packer.h"
#include "model/tensor_names.h"

namespace moex {

namespace {

uint64_t NextRandom(uint64_t* s) {
  *s += 0x9E3779B97F4A7C15ull;
  uint64_t z = *s;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::string RouterTensorName(Arch arch, int layer) {
  ModelConfig c;
  c.arch = arch;
  return TensorNames::Layer(layer, TensorNamesFor(c).router);
}

RandomWeightSource::RandomWeightSource(const ModelConfig& c, DType dtype, uint64_t seed,
                                       float scale) {
  uint64_t state = seed;
  const int64_t d = c.hidden_size;
  const int64_t f = c.moe_intermediate_size;
  for (int l = 0; l < c.num_layers; ++l) {
    if (!c.IsMoeLayer(l)) continue;
    Add(RouterTensorName(c.arch, l), DType::kF32, {c.num_experts, d}, &state, 1.0f);
    for (int e = 0; e < c.num_experts; ++e) {
      Add(RoutedExpertTensorName(c.arch, l, e, 0), dtype, {f, d}, &state, scale);
      Add(RoutedExpertTensorName(c.arch, l, e, 1), dtype, {f, d}, &state, scale);
      Add(RoutedExpertTensorName(c.arch, l, e, 2), dtype, {d, f}, &state, scale);
    }
  }
}

void RandomWeightSource::Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                             uint64_t* state, float scale) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<std::byte> bytes(DTypeBytes(dtype, n));
  for (int64_t i = 0; i < n; ++i) {
    const float v = (static_cast<float>(NextRandom(state) >> 40) / 16777216.0f * 2 - 1) * scale;
    if (dtype == DType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? F32ToBF16(v) : F32ToF16(v);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  auto& stored = data_[name] = std::move(bytes);
  TensorView view;
  view.name = name;
  view.dtype = dtype;
  view.shape = std::move(shape);
  view.data = stored.data();
  view.nbytes = stored.size();
  views_[name] = view;
}

const TensorView* RandomWeightSource::Find(const std::string& name) const {
  auto it = views_.find(name);
  return it == views_.end() ? nullptr : &it->second;
}

std::vector<std::string> RandomWeightSource::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, view] : views_) names.push_back(name);
  return names;
}

}  // namespace moex

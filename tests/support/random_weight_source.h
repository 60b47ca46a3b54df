// An in-memory WeightSource holding random routed experts and routers for a config: the
// fixture for store, tier and policy tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/weight_source.h"
#include "model/model_config.h"

namespace moex {

class RandomWeightSource : public WeightSource {
 public:
  // Routed expert tensors (HF names for config.arch) and router weights
  // ("model.layers.L.mlp.gate.weight", [E, d]), uniform in [-scale, scale].
  RandomWeightSource(const ModelConfig& config, DType dtype, uint64_t seed, float scale = 0.05f);

  const TensorView* Find(const std::string& name) const override;
  std::vector<std::string> Names() const override;
  std::string Describe() const override { return "random-weights"; }

  // Mutable access for fault tests.
  std::vector<std::byte>& Bytes(const std::string& name) { return data_.at(name); }

 private:
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape, uint64_t* state,
           float scale);

  std::map<std::string, std::vector<std::byte>> data_;
  std::map<std::string, TensorView> views_;
};

// Router weight name used by RandomWeightSource and the policies' router loaders.
std::string RouterTensorName(Arch arch, int layer);

}  // namespace moex

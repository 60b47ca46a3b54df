#include "model/gpt_oss_weights.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "model/tensor_names.h"

namespace moex {

namespace {

constexpr const char* kGateUp = "mlp.experts.gate_up_proj";
constexpr const char* kGateUpBias = "mlp.experts.gate_up_proj_bias";
constexpr const char* kDown = "mlp.experts.down_proj";
constexpr const char* kDownBias = "mlp.experts.down_proj_bias";

class GptOssHfWeights : public WeightSource {
 public:
  GptOssHfWeights(std::unique_ptr<WeightSource> hf, const ModelConfig& c);

  const TensorView* Find(const std::string& name) const override;
  std::vector<std::string> Names() const override;
  std::string Describe() const override { return hf_->Describe(); }
  void ReleasePages(const TensorView& tensor) const override {
    if (!entries_.contains(tensor.name)) hf_->ReleasePages(tensor);
  }
  std::vector<std::string> Unmapped() const override { return hf_->Unmapped(); }
  std::string FileName(const std::string& name) const override {
    const auto it = entries_.find(name);
    return it == entries_.end() ? hf_->FileName(name) : it->second->source;
  }

 private:
  // A tensor built from a fused one: `fill` writes its bytes into `owned` on first Find().
  struct Entry {
    TensorView view;
    std::string source;  // The fused tensor it comes from, for messages.
    std::function<void(std::byte*)> fill;
    std::vector<std::byte> owned;
    std::once_flag once;
  };
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           const std::string& source, std::function<void(std::byte*)> fill);

  std::unique_ptr<WeightSource> hf_;
  std::unordered_map<std::string, std::unique_ptr<Entry>> entries_;
  std::unordered_set<std::string> fused_;  // Replaced by entries_ in Names().
};

// The fused tensor `stem` of layer l with `shape`; null when absent (the model's loader
// then names the per-expert tensor it misses).
const TensorView* Fused(const WeightSource& hf, int l, const char* stem,
                        const std::vector<int64_t>& shape) {
  const TensorView* t = hf.Find(TensorNames::Layer(l, stem));
  if (t == nullptr) return nullptr;
  Check(t->shape == shape, hf.Describe(), ": tensor ", t->name, " has shape ",
        ShapeString(t->shape), ", expected ", ShapeString(shape));
  Check(!IsBlockQuantized(t->dtype), hf.Describe(), ": tensor ", t->name, " is ",
        DTypeName(t->dtype), "; gpt-oss checkpoints are read in f32, f16 or bf16");
  return t;
}

GptOssHfWeights::GptOssHfWeights(std::unique_ptr<WeightSource> hf, const ModelConfig& c)
    : hf_(std::move(hf)) {
  const TensorNames n = TensorNamesFor(c);
  const int64_t E = c.num_experts, d = c.hidden_size, F = c.moe_intermediate_size;
  for (int l = 0; l < c.num_layers; ++l) {
    auto layer = [l](const std::string& s) { return TensorNames::Layer(l, s); };
    if (const TensorView* gu = Fused(*hf_, l, kGateUp, {E, d, 2 * F})) {
      fused_.insert(gu->name);
      const size_t es = DTypeBytes(gu->dtype, 1);
      for (int64_t e = 0; e < E; ++e) {
        for (int parity = 0; parity < 2; ++parity) {
          // Row i of gate (parity 0) or up (1) is column 2i + parity of expert e's [d, 2F].
          const std::byte* base = gu->data + static_cast<size_t>(e * d * 2 * F) * es;
          Add(n.Expert(l, static_cast<int>(e), parity == 0 ? ExpertMatrix::kGate : ExpertMatrix::kUp),
              gu->dtype, {F, d}, gu->name, [=](std::byte* out) {
                for (int64_t i = 0; i < F; ++i)
                  for (int64_t k = 0; k < d; ++k)
                    std::memcpy(out + static_cast<size_t>(i * d + k) * es,
                                base + static_cast<size_t>(k * 2 * F + 2 * i + parity) * es, es);
              });
        }
      }
    }
    if (const TensorView* dn = Fused(*hf_, l, kDown, {E, F, d})) {
      fused_.insert(dn->name);
      const size_t es = DTypeBytes(dn->dtype, 1);
      for (int64_t e = 0; e < E; ++e) {
        const std::byte* base = dn->data + static_cast<size_t>(e * F * d) * es;
        Add(n.Expert(l, static_cast<int>(e), ExpertMatrix::kDown), dn->dtype, {d, F}, dn->name,
            [=](std::byte* out) {
              for (int64_t j = 0; j < d; ++j)
                for (int64_t i = 0; i < F; ++i)
                  std::memcpy(out + static_cast<size_t>(j * F + i) * es,
                              base + static_cast<size_t>(i * d + j) * es, es);
            });
      }
    }
    if (const TensorView* b = Fused(*hf_, l, kGateUpBias, {E, 2 * F})) {
      fused_.insert(b->name);
      const size_t es = DTypeBytes(b->dtype, 1);
      for (int parity = 0; parity < 2; ++parity) {
        Add(layer(parity == 0 ? n.expert_gate_bias : n.expert_up_bias), b->dtype, {E, F}, b->name,
            [=](std::byte* out) {
              for (int64_t k = 0; k < E * F; ++k)
                std::memcpy(out + static_cast<size_t>(k) * es,
                            b->data + static_cast<size_t>(2 * k + parity) * es, es);
            });
      }
    }
    if (const TensorView* b = Fused(*hf_, l, kDownBias, {E, d})) {
      fused_.insert(b->name);
      const size_t bytes = b->nbytes;
      Add(layer(n.expert_down_bias), b->dtype, {E, d}, b->name,
          [=](std::byte* out) { std::memcpy(out, b->data, bytes); });
    }
  }
}

void GptOssHfWeights::Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                          const std::string& source, std::function<void(std::byte*)> fill) {
  auto e = std::make_unique<Entry>();
  e->view.name = name;
  e->view.dtype = dtype;
  e->view.shape = std::move(shape);
  e->view.nbytes = DTypeBytes(dtype, e->view.numel());
  e->source = source;
  e->fill = std::move(fill);
  Check(hf_->Find(name) == nullptr, hf_->Describe(), ": tensor ", name,
        " is stored both on its own and in the fused ", source);
  entries_.emplace(name, std::move(e));
}

const TensorView* GptOssHfWeights::Find(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) return hf_->Find(name);
  Entry& e = *it->second;
  std::call_once(e.once, [&] {
    e.owned.resize(e.view.nbytes);
    e.fill(e.owned.data());
    e.view.data = e.owned.data();
  });
  return &e.view;
}

std::vector<std::string> GptOssHfWeights::Names() const {
  std::vector<std::string> names;
  for (const std::string& name : hf_->Names())
    if (!fused_.contains(name)) names.push_back(name);
  for (const auto& [name, entry] : entries_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::unique_ptr<WeightSource> WrapGptOssHfWeights(std::unique_ptr<WeightSource> hf,
                                                  const ModelConfig& config) {
  return std::make_unique<GptOssHfWeights>(std::move(hf), config);
}

}  // namespace moex

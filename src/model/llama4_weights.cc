#include "model/llama4_weights.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/mutex.h"
#include "model/tensor_names.h"

namespace moex {

namespace {

constexpr const char* kPrefix = "language_model.";
constexpr const char* kGateUp = "feed_forward.experts.gate_up_proj";
constexpr const char* kDown = "feed_forward.experts.down_proj";

class Llama4HfWeights : public WeightSource {
 public:
  Llama4HfWeights(std::unique_ptr<HfCheckpoint> hf, const ModelConfig& c);

  const TensorView* Find(const std::string& name) const override;
  std::vector<std::string> Names() const override;
  std::string Describe() const override { return hf_->Describe(); }
  // A built copy is freed (the model has its own now; a later Find() builds it again), so
  // that packing a store from a large checkpoint does not keep every expert twice.
  void ReleasePages(const TensorView& tensor) const override {
    const auto it = entries_.find(tensor.name);
    if (it == entries_.end()) return hf_->ReleasePages(tensor);
    Entry& e = *it->second;
    if (e.alias != nullptr) return hf_->ReleasePages(*e.alias);
    MutexLock lock(&e.mutex);
    std::vector<std::byte>().swap(e.owned);
    e.view.data = nullptr;
  }
  bool Maps(const TensorView& tensor) const override {
    const auto it = entries_.find(tensor.name);
    if (it == entries_.end()) return hf_->Maps(tensor);
    return it->second->alias != nullptr && hf_->Maps(*it->second->alias);
  }
  std::vector<std::string> Unmapped() const override { return hf_->Unmapped(); }
  std::string FileName(const std::string& name) const override {
    const auto it = entries_.find(name);
    return it == entries_.end() ? hf_->FileName(name) : it->second->source;
  }

 private:
  // A tensor under another name (`alias`: the checkpoint's own bytes), or built from one
  // (`fill` writes its bytes into `owned` when Find() finds none).
  struct Entry {
    std::string source;  // The checkpoint's tensor it comes from, for messages.
    const TensorView* alias = nullptr;
    std::function<void(std::byte*)> fill;
    Mutex mutex;
    TensorView view GUARDED_BY(mutex);
    std::vector<std::byte> owned GUARDED_BY(mutex);  // Empty when not built (or freed).
  };
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           const std::string& source, std::function<void(std::byte*)> fill);
  // The checkpoint's tensor for moex's `name` (with the multimodal prefix when it has one).
  const TensorView* Stored(const std::string& name) const {
    return hf_->Find(prefixed_ ? kPrefix + name : name);
  }
  const TensorView* Fused(int l, const char* stem, const std::vector<int64_t>& shape);

  std::unique_ptr<HfCheckpoint> hf_;
  bool prefixed_ = false;
  std::unordered_map<std::string, std::unique_ptr<Entry>> entries_;
  std::unordered_set<std::string> replaced_;  // Checkpoint names entries_ stand for.
};

const TensorView* Llama4HfWeights::Fused(int l, const char* stem,
                                         const std::vector<int64_t>& shape) {
  const TensorView* t = Stored(TensorNames::Layer(l, stem));
  if (t == nullptr) return nullptr;
  Check(t->shape == shape, hf_->Describe(), ": tensor ", t->name, " has shape ",
        ShapeString(t->shape), ", expected ", ShapeString(shape));
  Check(!IsBlockQuantized(t->dtype), hf_->Describe(), ": tensor ", t->name, " is ",
        DTypeName(t->dtype), "; Llama 4's fused experts are read in f32, f16 or bf16");
  replaced_.insert(t->name);
  return t;
}

Llama4HfWeights::Llama4HfWeights(std::unique_ptr<HfCheckpoint> hf, const ModelConfig& c)
    : hf_(std::move(hf)) {
  const TensorNames n = TensorNamesFor(c);
  prefixed_ = hf_->Find(kPrefix + n.embed) != nullptr;
  const int64_t E = c.num_experts, d = c.hidden_size, F = c.moe_intermediate_size;
  const int64_t hd = c.head_dim, half = hd / 2;
  for (int l = 0; l < c.num_layers; ++l) {
    // q/k rows of each head from HF's pairs (2i, 2i + 1) to halves (i, i + half).
    for (const std::string* stem : {&n.q, &n.k, &n.q_bias, &n.k_bias}) {
      const TensorView* t = Stored(TensorNames::Layer(l, *stem));
      if (t == nullptr) continue;
      Check(!IsBlockQuantized(t->dtype) && !t->shape.empty() && t->shape[0] % hd == 0,
            hf_->Describe(), ": tensor ", t->name, " (", DTypeName(t->dtype), " ",
            ShapeString(t->shape), ") is not whole heads of ", hd, " rows in f32, f16 or bf16");
      replaced_.insert(t->name);
      const size_t row = DTypeBytes(t->dtype, t->numel() / t->shape[0]);
      const int64_t rows = t->shape[0];
      Add(TensorNames::Layer(l, *stem), t->dtype, t->shape, t->name, [=](std::byte* out) {
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t head = r / hd, j = (r % hd) / half, i = r % half;
          std::memcpy(out + static_cast<size_t>(r) * row,
                      t->data + static_cast<size_t>(head * hd + 2 * i + j) * row, row);
        }
      });
    }
    if (const TensorView* gu = Fused(l, kGateUp, {E, d, 2 * F})) {
      const size_t es = DTypeBytes(gu->dtype, 1);
      for (int64_t e = 0; e < E; ++e) {
        for (int half_index = 0; half_index < 2; ++half_index) {
          // Row i of gate (0) or up (1) is column half_index * F + i of expert e's [d, 2F].
          const std::byte* base = gu->data + static_cast<size_t>(e * d * 2 * F) * es;
          Add(n.Expert(l, static_cast<int>(e),
                       half_index == 0 ? ExpertMatrix::kGate : ExpertMatrix::kUp),
              gu->dtype, {F, d}, gu->name, [=](std::byte* out) {
                for (int64_t i = 0; i < F; ++i)
                  for (int64_t k = 0; k < d; ++k)
                    std::memcpy(out + static_cast<size_t>(i * d + k) * es,
                                base + static_cast<size_t>(k * 2 * F + half_index * F + i) * es,
                                es);
              });
        }
      }
    }
    if (const TensorView* dn = Fused(l, kDown, {E, F, d})) {
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
  }
  if (!prefixed_) return;
  // The rest of the language model under its own names; the vision tower stays as stored.
  for (const std::string& name : hf_->Names()) {
    if (!name.starts_with(kPrefix) || replaced_.contains(name)) continue;
    const std::string own = name.substr(std::string(kPrefix).size());
    const TensorView* t = hf_->Find(name);
    auto e = std::make_unique<Entry>();
    {
      MutexLock lock(&e->mutex);
      e->view = *t;
      e->view.name = own;
    }
    e->source = name;
    e->alias = t;
    Check(hf_->Find(own) == nullptr, hf_->Describe(), ": tensor ", own, " is stored both as ", own,
          " and as ", name);
    replaced_.insert(name);
    entries_.emplace(own, std::move(e));
  }
}

void Llama4HfWeights::Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                          const std::string& source, std::function<void(std::byte*)> fill) {
  auto e = std::make_unique<Entry>();
  {
    MutexLock lock(&e->mutex);
    e->view.name = name;
    e->view.dtype = dtype;
    e->view.shape = std::move(shape);
    e->view.nbytes = DTypeBytes(dtype, e->view.numel());
  }
  e->source = source;
  e->fill = std::move(fill);
  Check(source == (prefixed_ ? kPrefix + name : name) || Stored(name) == nullptr, hf_->Describe(),
        ": tensor ", name, " is stored both on its own and in the fused ", source);
  entries_.emplace(name, std::move(e));
}

const TensorView* Llama4HfWeights::Find(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) return replaced_.contains(name) ? nullptr : hf_->Find(name);
  Entry& e = *it->second;
  MutexLock lock(&e.mutex);
  if (e.alias == nullptr && e.owned.empty()) {
    e.owned.resize(e.view.nbytes);
    e.fill(e.owned.data());
    e.view.data = e.owned.data();
  }
  return &e.view;
}

std::vector<std::string> Llama4HfWeights::Names() const {
  std::vector<std::string> names;
  for (const std::string& name : hf_->Names())
    if (!replaced_.contains(name)) names.push_back(name);
  for (const auto& [name, entry] : entries_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::unique_ptr<WeightSource> WrapLlama4HfWeights(std::unique_ptr<HfCheckpoint> hf,
                                                  const ModelConfig& config) {
  return std::make_unique<Llama4HfWeights>(std::move(hf), config);
}

}  // namespace moex

#include "model/gpt_oss_weights.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/name_list.h"
#include "model/hf_mxfp4.h"
#include "model/tensor_names.h"

namespace moex {

namespace {

constexpr const char* kGateUp = "mlp.experts.gate_up_proj";
constexpr const char* kGateUpBias = "mlp.experts.gate_up_proj_bias";
constexpr const char* kDown = "mlp.experts.down_proj";
constexpr const char* kDownBias = "mlp.experts.down_proj_bias";
constexpr const char* kExperts = "mlp.experts";

class GptOssHfWeights : public WeightSource {
 public:
  GptOssHfWeights(std::unique_ptr<HfCheckpoint> hf, const ModelConfig& c);

  const TensorView* Find(const std::string& name) const override;
  std::vector<std::string> Names() const override;
  std::string Describe() const override { return hf_->Describe(); }
  void ReleasePages(const TensorView& tensor) const override {
    if (!entries_.contains(tensor.name)) hf_->ReleasePages(tensor);
  }
  bool Maps(const TensorView& tensor) const override {
    return !entries_.contains(tensor.name) && hf_->Maps(tensor);
  }
  // Every U8 tensor is an MXFP4 expert tensor taken over here (others are refused).
  std::vector<std::string> Unmapped() const override { return {}; }
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
  // Layer l's experts from MXFP4 _blocks/_scales; false when the layer has none.
  bool AddMxfp4Experts(const ModelConfig& c, int l);

  std::unique_ptr<HfCheckpoint> hf_;
  std::unordered_set<std::string> taken_bytes_;  // U8 tensors read by AddMxfp4Experts.
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

// A U8 tensor `name` of `shape`; null when absent.
const ByteTensor* Packed(const HfCheckpoint& hf, const std::string& name,
                         const std::vector<int64_t>& shape) {
  const ByteTensor* t = hf.FindBytes(name);
  if (t == nullptr) return nullptr;
  Check(t->shape == shape, hf.Describe(), ": MXFP4 tensor ", name, " has shape ",
        ShapeString(t->shape), ", expected ", ShapeString(shape));
  return t;
}

GptOssHfWeights::GptOssHfWeights(std::unique_ptr<HfCheckpoint> hf, const ModelConfig& c)
    : hf_(std::move(hf)) {
  const TensorNames n = TensorNamesFor(c);
  const int64_t E = c.num_experts, d = c.hidden_size, F = c.moe_intermediate_size;
  for (int l = 0; l < c.num_layers; ++l) {
    auto layer = [l](const std::string& s) { return TensorNames::Layer(l, s); };
    const bool mxfp4 = AddMxfp4Experts(c, l);
    if (const TensorView* gu = Fused(*hf_, l, kGateUp, {E, d, 2 * F})) {
      Check(!mxfp4, hf_->Describe(), ": tensor ", gu->name, " is stored both unquantised and as ",
            "MXFP4 (", gu->name, "_blocks)");
      fused_.insert(gu->name);
      const size_t es = DTypeBytes(gu->dtype, 1);
      for (int64_t e = 0; e < E; ++e) {
        for (int parity = 0; parity < 2; ++parity) {
          // Row i of gate (parity 0) or up (1) is column 2i + parity of expert e's [d, 2F].
          const std::byte* base = gu->data + static_cast<size_t>(e * d * 2 * F) * es;
          Add(n.Expert(l, static_cast<int>(e),
                       parity == 0 ? ExpertMatrix::kGate : ExpertMatrix::kUp),
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
      Check(!mxfp4, hf_->Describe(), ": tensor ", dn->name, " is stored both unquantised and as ",
            "MXFP4 (", dn->name, "_blocks)");
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
  std::vector<std::string> other;
  for (const std::string& name : hf_->Unmapped())
    if (!taken_bytes_.contains(name)) other.push_back(name);
  Check(other.empty(), hf_->Describe(), ": U8 tensor(s) ", NameList(other), " are not MXFP4 ",
        "routed experts of a layer below num_hidden_layers (mlp.experts.gate_up_proj_blocks/",
        "_scales, mlp.experts.down_proj_blocks/_scales), the only packed tensors moex reads");
}

bool GptOssHfWeights::AddMxfp4Experts(const ModelConfig& c, int l) {
  const HfCheckpoint& hf = *hf_;
  const std::string where = hf.Describe();
  const std::string module = TensorNames::Layer(l, kExperts);
  const std::string gate_up = TensorNames::Layer(l, kGateUp), down = TensorNames::Layer(l, kDown);
  const bool any = hf.FindBytes(gate_up + "_blocks") || hf.FindBytes(gate_up + "_scales") ||
                   hf.FindBytes(down + "_blocks") || hf.FindBytes(down + "_scales");
  const std::optional<HfQuantization>& q = hf.quantization();
  const std::vector<std::string> matrices = {"gate_up_proj", "down_proj"};
  const std::optional<std::string> skipped = q ? q->NotConverted(module, matrices) : std::nullopt;
  if (q) {
    const auto part = q->CoversPartOf(module, matrices);
    Check(!part, where, ": quantization_config.modules_to_not_convert entry '", part.value_or(""),
          "' names only part of ", module, "; moex reads a layer's experts either all MXFP4 or ",
          "all unquantised");
  }
  if (!any) {
    // quantization_config promises MXFP4 experts here: unquantised ones contradict it.
    const TensorView* plain = hf.Find(gate_up) ? hf.Find(gate_up) : hf.Find(down);
    Check(!q || skipped || plain == nullptr, where, ": config.json's quantization_config ",
          "(mxfp4) does not exclude ", module, " in modules_to_not_convert, but tensor ",
          plain ? plain->name : "", " stores its experts unquantised (expected ",
          plain ? plain->name : "", "_blocks and _scales)");
    return false;
  }
  const std::string first = hf.FindBytes(gate_up + "_blocks")   ? gate_up + "_blocks"
                            : hf.FindBytes(gate_up + "_scales") ? gate_up + "_scales"
                            : hf.FindBytes(down + "_blocks")    ? down + "_blocks"
                                                                : down + "_scales";
  Check(q.has_value(), where, ": tensor ", first, " holds MXFP4 experts, but config.json has ",
        "no quantization_config (quant_method \"mxfp4\")");
  Check(!skipped, where, ": config.json's quantization_config.modules_to_not_convert entry '",
        skipped.value_or(""), "' covers ", module, ", but tensor ", first,
        " stores its experts as MXFP4");
  const int64_t E = c.num_experts, d = c.hidden_size, F = c.moe_intermediate_size;
  Check(d % 32 == 0 && F % 32 == 0, where, ": tensor ", first, " holds MXFP4 experts in blocks ",
        "of 32, but hidden_size ", d, " and intermediate_size ", F,
        " are not both multiples of 32");
  const TensorNames n = TensorNamesFor(c);
  for (const auto& part : {std::tuple{gate_up, 2 * F, d}, std::tuple{down, d, F}}) {
    const std::string& stem = std::get<0>(part);
    const int64_t rows = std::get<1>(part), cols = std::get<2>(part);
    const ByteTensor* blocks =
        Packed(hf, stem + "_blocks", {E, rows, cols / 32, kHfMxfp4BlockBytes});
    const ByteTensor* scales = Packed(hf, stem + "_scales", {E, rows, cols / 32});
    Check(blocks != nullptr || scales != nullptr, where, ": tensor ", first, " holds layer ", l,
          "'s experts as MXFP4, but ", stem, "_blocks and ", stem, "_scales are missing");
    Check(blocks != nullptr, where, ": MXFP4 tensor ", stem, "_scales has no ", stem, "_blocks");
    Check(scales != nullptr, where, ": MXFP4 tensor ", stem, "_blocks has no ", stem, "_scales");
    taken_bytes_.insert(blocks->name);
    taken_bytes_.insert(scales->name);
    const int64_t row_blocks = cols / 32;
    const size_t out_row = static_cast<size_t>(row_blocks) * kGgmlMxfp4BlockBytes;
    const auto* codes = reinterpret_cast<const uint8_t*>(blocks->data);
    const auto* exps = reinterpret_cast<const uint8_t*>(scales->data);
    const std::string scales_name = scales->name;
    for (int64_t e = 0; e < E; ++e) {
      // gate_up: gate = even rows, up = odd rows (parity); down: every row (stride 1).
      const bool fused = stem == gate_up;
      for (int parity = 0; parity < (fused ? 2 : 1); ++parity) {
        const ExpertMatrix m = !fused        ? ExpertMatrix::kDown
                               : parity == 0 ? ExpertMatrix::kGate
                                             : ExpertMatrix::kUp;
        const int64_t out_rows = fused ? F : d;
        Add(n.Expert(l, static_cast<int>(e), m), DType::kMXFP4, {out_rows, cols}, blocks->name,
            [=](std::byte* out) {
              for (int64_t i = 0; i < out_rows; ++i) {
                const int64_t src_row = e * rows + (fused ? 2 * i + parity : i);
                for (int64_t b = 0; b < row_blocks; ++b) {
                  const int64_t k = src_row * row_blocks + b;
                  Check(exps[k] != 0xff, where, ": MXFP4 tensor ", scales_name, " has exponent ",
                        "0xFF (NaN) at expert ", e, ", row ", src_row - e * rows, ", block ", b);
                  HfToGgmlMxfp4Block(
                      codes + k * kHfMxfp4BlockBytes, exps[k],
                      reinterpret_cast<uint8_t*>(out) + i * out_row + b * kGgmlMxfp4BlockBytes);
                }
              }
            });
      }
    }
  }
  return true;
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

std::unique_ptr<WeightSource> WrapGptOssHfWeights(std::unique_ptr<HfCheckpoint> hf,
                                                  const ModelConfig& config) {
  return std::make_unique<GptOssHfWeights>(std::move(hf), config);
}

}  // namespace moex

#include "model/hf_fp8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/mutex.h"

namespace moex {

float Fp8E4M3ToFloat(uint8_t code) {
  const bool negative = code & 0x80;
  const int e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 0xF && m == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                                 : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return negative ? -magnitude : magnitude;
}

uint8_t FloatToFp8E4M3(float x) {
  if (std::isnan(x)) return 0x7F;
  // The 127 non-negative finite codes in increasing order of value.
  static const std::array<float, 127> kValues = [] {
    std::array<float, 127> v{};
    for (int c = 0; c < 127; ++c)
      v[static_cast<size_t>(c)] = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    return v;
  }();
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::min(std::fabs(x), kValues.back());
  const auto it = std::lower_bound(kValues.begin(), kValues.end(), a);
  int code = static_cast<int>(it - kValues.begin());
  if (*it != a && code > 0) {
    const float above = *it - a, below = a - kValues[static_cast<size_t>(code - 1)];
    if (below < above || (below == above && (code - 1) % 2 == 0)) --code;
  }
  return static_cast<uint8_t>(sign | code);
}

namespace {

constexpr const char* kScaleSuffix = "_scale_inv";  // X.weight -> X.weight_scale_inv.

class Fp8HfWeights : public WeightSource {
 public:
  explicit Fp8HfWeights(std::unique_ptr<HfCheckpoint> hf);

  const TensorView* Find(const std::string& name) const override;
  std::vector<std::string> Names() const override;
  std::string Describe() const override { return hf_->Describe(); }
  void ReleasePages(const TensorView& tensor) const override;
  bool Maps(const TensorView& tensor) const override {
    return !entries_.contains(tensor.name) && hf_->Maps(tensor);
  }
  std::vector<std::string> Unmapped() const override;

 private:
  // One FP8 weight: its codes and scales in the checkpoint, and the bf16 copy while made.
  struct Entry {
    const ByteTensor* codes = nullptr;
    const TensorView* scales = nullptr;
    Mutex mutex;
    TensorView view GUARDED_BY(mutex);
    std::vector<uint16_t> bf16 GUARDED_BY(mutex);  // Empty when not made (or freed).
  };
  void Convert(Entry& e) const REQUIRES(e.mutex);

  std::unique_ptr<HfCheckpoint> hf_;
  std::array<int, 2> block_{};
  std::unordered_map<std::string, std::unique_ptr<Entry>> entries_;
  std::unordered_set<std::string> scales_;  // Consumed weight_scale_inv names.
};

Fp8HfWeights::Fp8HfWeights(std::unique_ptr<HfCheckpoint> hf) : hf_(std::move(hf)) {
  const HfCheckpoint& h = *hf_;
  block_ = h.quantization()->weight_block;
  for (const std::string& name : h.Unmapped()) {
    const ByteTensor* codes = h.FindBytes(name);
    if (codes == nullptr || codes->dtype != "F8_E4M3") continue;
    Check(codes->shape.size() == 2 && name.ends_with(".weight"), h.Describe(), ": FP8 tensor ",
          name, " of shape ", ShapeString(codes->shape),
          " is not a 2-D weight (moex reads FP8 Linear weights)");
    Check(h.Find(name) == nullptr, h.Describe(), ": tensor ", name,
          " is stored both in FP8 and unquantized");
    const std::string scale_name = name + kScaleSuffix;
    const TensorView* scales = h.Find(scale_name);
    Check(scales != nullptr, h.Describe(), ": FP8 tensor ", name, " has no ", scale_name);
    const int64_t rows = codes->shape[0], cols = codes->shape[1];
    const std::vector<int64_t> want = {(rows + block_[0] - 1) / block_[0],
                                       (cols + block_[1] - 1) / block_[1]};
    Check(scales->shape == want && (scales->dtype == DType::kF32 || scales->dtype == DType::kBF16),
          h.Describe(), ": ", scale_name, " is ", DTypeName(scales->dtype), " ",
          ShapeString(scales->shape), ", expected f32 or bf16 ", ShapeString(want),
          " (weight_block_size [", block_[0], ", ", block_[1], "] over ", ShapeString(codes->shape),
          ")");
    auto e = std::make_unique<Entry>();
    e->codes = codes;
    e->scales = scales;
    e->view.name = name;
    e->view.dtype = DType::kBF16;
    e->view.shape = codes->shape;
    e->view.nbytes = DTypeBytes(DType::kBF16, rows * cols);
    entries_.emplace(name, std::move(e));
    scales_.insert(scale_name);
  }
  for (const std::string& name : h.Names())
    Check(!name.ends_with(std::string(".weight") + kScaleSuffix) || scales_.contains(name),
          h.Describe(), ": ", name, " scales no FP8 weight (",
          name.substr(0, name.size() - std::string(kScaleSuffix).size()),
          " is missing or not F8_E4M3)");
}

void Fp8HfWeights::Convert(Entry& e) const {
  const int64_t rows = e.codes->shape[0], cols = e.codes->shape[1];
  const int64_t scale_cols = e.scales->shape[1];
  const auto* codes = reinterpret_cast<const uint8_t*>(e.codes->data);
  std::vector<float> scales(static_cast<size_t>(e.scales->numel()));
  for (size_t i = 0; i < scales.size(); ++i)
    scales[i] = e.scales->dtype == DType::kF32
                    ? reinterpret_cast<const float*>(e.scales->data)[i]
                    : BF16ToF32(reinterpret_cast<const uint16_t*>(e.scales->data)[i]);
  for (const float s : scales)
    Check(std::isfinite(s), hf_->Describe(), ": ", e.codes->name, kScaleSuffix,
          " holds a non-finite scale (", s, ")");
  e.bf16.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row_scales = &scales[static_cast<size_t>((r / block_[0]) * scale_cols)];
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      e.bf16[i] = F32ToBF16(Fp8E4M3ToFloat(codes[i]) * row_scales[c / block_[1]]);
    }
  }
  e.view.data = reinterpret_cast<const std::byte*>(e.bf16.data());
}

const TensorView* Fp8HfWeights::Find(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) return scales_.contains(name) ? nullptr : hf_->Find(name);
  Entry& e = *it->second;
  MutexLock lock(&e.mutex);
  if (e.bf16.empty()) Convert(e);
  return &e.view;
}

void Fp8HfWeights::ReleasePages(const TensorView& tensor) const {
  const auto it = entries_.find(tensor.name);
  if (it == entries_.end()) return hf_->ReleasePages(tensor);
  // The model has its own copy now: free ours (a later Find() converts again) and drop the
  // codes' pages.
  Entry& e = *it->second;
  MutexLock lock(&e.mutex);
  std::vector<uint16_t>().swap(e.bf16);
  e.view.data = nullptr;
  TensorView codes;
  codes.name = e.codes->name;
  codes.data = e.codes->data;
  codes.nbytes = e.codes->nbytes;
  hf_->ReleasePages(codes);
}

std::vector<std::string> Fp8HfWeights::Names() const {
  std::vector<std::string> names;
  for (const std::string& name : hf_->Names())
    if (!scales_.contains(name)) names.push_back(name);
  for (const auto& [name, entry] : entries_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> Fp8HfWeights::Unmapped() const {
  std::vector<std::string> names;
  for (const std::string& name : hf_->Unmapped())
    if (!entries_.contains(name)) names.push_back(name);
  return names;
}

}  // namespace

std::unique_ptr<WeightSource> WrapFp8HfWeights(std::unique_ptr<HfCheckpoint> hf) {
  return std::make_unique<Fp8HfWeights>(std::move(hf));
}

}  // namespace moex

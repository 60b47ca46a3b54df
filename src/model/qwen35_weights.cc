#include "model/qwen35_weights.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "core/error.h"
#include "core/logging.h"
#include "model/tensor_names.h"

namespace moex {

namespace {

constexpr std::string_view kTextPrefix = "model.language_model.";

class Qwen35HfWeights : public WeightSource {
 public:
  Qwen35HfWeights(std::unique_ptr<WeightSource> hf, const ModelConfig& c) : hf_(std::move(hf)) {
    const TensorNames n = TensorNamesFor(c);
    size_t skipped = 0;
    for (const std::string& file_name : hf_->Names()) {
      std::string name;
      if (file_name.rfind(kTextPrefix, 0) == 0)
        name = "model." + file_name.substr(kTextPrefix.size());
      else if (file_name.rfind("model.", 0) == 0 || file_name.rfind("mtp.", 0) == 0)
        name.clear();  // The vision tower (model.visual.*) and the MTP layers.
      else
        name = file_name;  // lm_head.weight, and a text-only checkpoint's own names.
      if (name.empty()) {
        ++skipped;
        continue;
      }
      const TensorView& t = hf_->Get(file_name);
      const bool gate_up = name.ends_with(".mlp.experts.gate_up_proj");
      if (gate_up || name.ends_with(".mlp.experts.down_proj")) {
        SplitExperts(name, file_name, t, c, n, gate_up);
        continue;
      }
      Add(name, file_name, t);
    }
    if (skipped > 0)
      Log(LogLevel::kInfo, hf_->Describe(), ": ", skipped,
          " vision-tower / MTP tensor(s) not read (moex runs the text model)");
  }

  const TensorView* Find(const std::string& name) const override {
    const auto it = views_.find(name);
    return it == views_.end() ? nullptr : &it->second.view;
  }
  std::vector<std::string> Names() const override {
    std::vector<std::string> names;
    for (const auto& [name, entry] : views_) names.push_back(name);
    return names;
  }
  std::string Describe() const override { return hf_->Describe(); }
  void ReleasePages(const TensorView& tensor) const override { hf_->ReleasePages(tensor); }
  bool Maps(const TensorView& tensor) const override { return hf_->Maps(tensor); }
  std::vector<std::string> Unmapped() const override { return hf_->Unmapped(); }
  std::string FileName(const std::string& name) const override {
    const auto it = views_.find(name);
    return it == views_.end() ? name : it->second.file_name;
  }

 private:
  struct Entry {
    TensorView view;
    std::string file_name;
  };

  void Add(const std::string& name, const std::string& file_name, TensorView view) {
    view.name = name;
    views_[name] = {std::move(view), file_name};
  }

  // "model.layers.{i}.mlp.experts.gate_up_proj" [E, 2F, d] or "...down_proj" [E, d, F] as
  // one view per expert and matrix.
  void SplitExperts(const std::string& name, const std::string& file_name, const TensorView& t,
                    const ModelConfig& c, const TensorNames& n, bool gate_up) {
    const int64_t E = c.num_experts, F = c.moe_intermediate_size, d = c.hidden_size;
    const std::vector<int64_t> want =
        gate_up ? std::vector<int64_t>{E, 2 * F, d} : std::vector<int64_t>{E, d, F};
    Check(t.shape == want, "tensor '", file_name, "' in ", hf_->Describe(), " has shape ",
          ShapeString(t.shape), ", expected ", ShapeString(want));
    Check(!IsBlockQuantized(t.dtype), "tensor '", file_name, "' in ", hf_->Describe(), " is ",
          DTypeName(t.dtype), ": fused experts are read in f32, f16 or bf16");
    const std::string layers = "model.layers.";
    const size_t end = name.find('.', layers.size());
    const int layer = std::stoi(name.substr(layers.size(), end - layers.size()));
    const size_t matrix_bytes = DTypeBytes(t.dtype, gate_up ? F * d : d * F);
    for (int64_t e = 0; e < E; ++e) {
      const std::byte* base = t.data + static_cast<size_t>(e) * (gate_up ? 2 : 1) * matrix_bytes;
      const auto view = [&](const std::byte* data, std::vector<int64_t> shape) {
        TensorView v = t;
        v.data = data;
        v.shape = std::move(shape);
        v.nbytes = matrix_bytes;
        return v;
      };
      const int ex = static_cast<int>(e);
      if (gate_up) {
        Add(n.Expert(layer, ex, ExpertMatrix::kGate), file_name, view(base, {F, d}));
        Add(n.Expert(layer, ex, ExpertMatrix::kUp), file_name, view(base + matrix_bytes, {F, d}));
      } else {
        Add(n.Expert(layer, ex, ExpertMatrix::kDown), file_name, view(base, {d, F}));
      }
    }
  }

  std::unique_ptr<WeightSource> hf_;
  std::map<std::string, Entry> views_;
};

}  // namespace

std::unique_ptr<WeightSource> WrapQwen35HfWeights(std::unique_ptr<WeightSource> hf,
                                                  const ModelConfig& config) {
  return std::make_unique<Qwen35HfWeights>(std::move(hf), config);
}

}  // namespace moex

// Next-layer gate speculation (MoEpic, also ProMoE's and ExpertFlow's baseline): layer l's
// gate input is fed to layer l+1's router; its per-token top-k are prefetched, highest
// score first. When layer l+1's real gate arrives, predictions it did not route to are
// cancelled (early preemption), so their queued chunks stop using the link.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/tensor_names.h"
#include "policy/composed_policy.h"

namespace moex::policy {
namespace {

float ToFloat(const TensorView& w, size_t i) {
  switch (w.dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, w.data + 4 * i, 4);
      return f;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, w.data + 2 * i, 2);
      return w.dtype == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
    }
    default:
      Fail("router ", w.name, " has unsupported dtype ", DTypeName(w.dtype));
  }
}

class NextGatePrefetcher : public Prefetcher {
 public:
  explicit NextGatePrefetcher(const PolicyContext& ctx) : config_(ctx.config) {
    Check(ctx.weights != nullptr, "policy nextgate needs the model's router weights");
    const TensorNames names = TensorNamesFor(config_);
    routers_.resize(static_cast<size_t>(config_.num_layers));
    for (int l = 0; l < config_.num_layers; ++l) {
      if (!config_.IsMoeLayer(l)) continue;
      const TensorView& w = ctx.weights->Get(TensorNames::Layer(l, names.router),
                                             {config_.num_experts, config_.hidden_size});
      std::vector<float>& r = routers_[static_cast<size_t>(l)];
      r.resize(static_cast<size_t>(w.numel()));
      for (size_t i = 0; i < r.size(); ++i) r[i] = ToFloat(w, i);
    }
  }
  std::string name() const override { return "nextgate"; }

  void OnGate(const GateEvent& e, Decisions* out) override {
    // Early preemption: drop this layer's predictions that the real gate did not pick.
    auto it = predicted_.find(e.layer);
    if (it != predicted_.end()) {
      std::set<int32_t> routed(e.ids, e.ids + e.n_tokens * e.top_k);
      for (int32_t id : it->second)
        if (!routed.count(id)) out->cancel.push_back({e.layer, id});
      predicted_.erase(it);
    }
    int next = e.layer + 1;
    while (next < config_.num_layers && !config_.IsMoeLayer(next)) ++next;
    if (next >= config_.num_layers || e.hidden == nullptr) return;
    const std::vector<float>& w = routers_[static_cast<size_t>(next)];
    const int E = config_.num_experts;
    const int k = config_.num_experts_per_tok;
    std::vector<float> best(static_cast<size_t>(E), -1e30f);  // Max logit over tokens.
    std::vector<float> logits(static_cast<size_t>(E));
    std::vector<int32_t> order(static_cast<size_t>(E));
    std::vector<char> chosen(static_cast<size_t>(E), 0);
    for (int64_t t = 0; t < e.n_tokens; ++t) {
      const float* h = e.hidden + t * e.d;
      for (int x = 0; x < E; ++x) {
        const float* row = &w[static_cast<size_t>(x) * static_cast<size_t>(e.d)];
        float s = 0;
        for (int64_t j = 0; j < e.d; ++j) s += row[j] * h[j];
        logits[static_cast<size_t>(x)] = s;
      }
      for (int x = 0; x < E; ++x) order[static_cast<size_t>(x)] = x;
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
               (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
      });
      for (int i = 0; i < k; ++i) {
        const size_t x = static_cast<size_t>(order[static_cast<size_t>(i)]);
        chosen[x] = 1;
        best[x] = std::max(best[x], logits[x]);
      }
    }
    std::vector<int32_t> picks;
    for (int x = 0; x < E; ++x)
      if (chosen[static_cast<size_t>(x)]) picks.push_back(x);
    std::stable_sort(picks.begin(), picks.end(), [&](int32_t a, int32_t b) {
      return best[static_cast<size_t>(a)] > best[static_cast<size_t>(b)];
    });
    for (size_t i = 0; i < picks.size(); ++i) {
      Prefetch p;
      p.expert = {next, picks[i]};
      p.priority = -static_cast<double>(i);  // Most confident first.
      out->prefetch.push_back(p);
    }
    predicted_[next] = picks;
  }

  void OnIterationEnd(Decisions*) override { predicted_.clear(); }

 private:
  ModelConfig config_;
  std::vector<std::vector<float>> routers_;  // Per layer [E, d] f32 (empty for dense).
  std::map<int, std::vector<int32_t>> predicted_;
};

}  // namespace

std::unique_ptr<Prefetcher> MakeNextGatePrefetcher(const PolicyContext& context) {
  return std::make_unique<NextGatePrefetcher>(context);
}

}  // namespace moex::policy

#include "policy/promoe/promoe_predictor.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"
#include "policy/common/mlp_training.h"

namespace moex::policy {

namespace {

// In place: each row of z [n, e] becomes its softmax; returns Σ −log p(target) / k.
double SoftmaxCrossEntropy(float* z, int64_t n, int e, const int32_t* ids, int k) {
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    float* row = z + i * e;
    const float top = *std::max_element(row, row + e);
    double sum = 0;
    for (int j = 0; j < e; ++j) sum += std::exp(static_cast<double>(row[j] - top));
    for (int j = 0; j < e; ++j)
      row[j] = static_cast<float>(std::exp(static_cast<double>(row[j] - top)) / sum);
    for (int j = 0; j < k; ++j)
      loss -= std::log(std::max(1e-30, static_cast<double>(row[ids[i * k + j]]))) / k;
  }
  return loss;
}

struct Adam {
  std::vector<float> m, v;
  explicit Adam(size_t n) : m(n, 0), v(n, 0) {}
  void Step(std::vector<float>& w, const std::vector<float>& g, double lr, int64_t t) {
    constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double c1 = 1 - std::pow(b1, static_cast<double>(t));
    const double c2 = 1 - std::pow(b2, static_cast<double>(t));
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = static_cast<float>(b1 * m[i] + (1 - b1) * g[i]);
      v[i] = static_cast<float>(b2 * v[i] + (1 - b2) * g[i] * g[i]);
      w[i] -= static_cast<float>(lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps));
    }
  }
};

}  // namespace

std::vector<int32_t> TopKIndices(const float* scores, int n, int k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  k = std::clamp(k, 0, n);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

ExpertPredictorMlp::ExpertPredictorMlp(int d, int hidden, int experts, uint64_t seed)
    : d_(d), hidden_(hidden), experts_(experts) {
  Check(d > 0 && hidden > 0 && experts > 1, "predictor shape d=", d, " hidden=", hidden,
        " experts=", experts, " is not a valid MLP");
  std::mt19937_64 rng(seed);
  auto init = [&rng](std::vector<float>& w, size_t n, int fan_in) {
    std::normal_distribution<float> normal(0, std::sqrt(2.0f / static_cast<float>(fan_in)));
    w.resize(n);
    for (float& x : w) x = normal(rng);
  };
  init(w1_, static_cast<size_t>(hidden) * d, d);
  init(w2_, static_cast<size_t>(experts) * hidden, hidden);
  b1_.assign(static_cast<size_t>(hidden), 0);
  b2_.assign(static_cast<size_t>(experts), 0);
}

int64_t ExpertPredictorMlp::parameters() const {
  return static_cast<int64_t>(w1_.size() + b1_.size() + w2_.size() + b2_.size());
}

void ExpertPredictorMlp::Forward(const float* x, int64_t n, float* scores) const {
  Check(!empty(), "the expert predictor is not trained");
  std::vector<float> h(static_cast<size_t>(n) * hidden_);
  for (int64_t i = 0; i < n; ++i) std::copy(b1_.begin(), b1_.end(), h.begin() + i * hidden_);
  Gemm(false, true, static_cast<int>(n), hidden_, d_, x, w1_.data(), h.data(), true);
  for (float& v : h) v = std::max(v, 0.0f);
  for (int64_t i = 0; i < n; ++i) std::copy(b2_.begin(), b2_.end(), scores + i * experts_);
  Gemm(false, true, static_cast<int>(n), experts_, hidden_, h.data(), w2_.data(), scores, true);
}

double ExpertPredictorMlp::Train(const float* x, const int32_t* ids, int64_t n, int k,
                                 const MlpTraining& t) {
  Check(!empty(), "the expert predictor has no shape");
  Check(k > 0 && t.batch > 0 && t.epochs > 0, "predictor training needs k, batch and epochs > 0");
  for (int64_t i = 0; i < n * k; ++i)
    Check(ids[i] >= 0 && ids[i] < experts_, "predictor sample routes to expert ", ids[i], " of ",
          experts_);
  std::mt19937_64 rng(t.seed);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Adam aw1(w1_.size()), ab1(b1_.size()), aw2(w2_.size()), ab2(b2_.size());
  std::vector<float> gw1(w1_.size()), gb1(b1_.size()), gw2(w2_.size()), gb2(b2_.size());
  const int B = t.batch;
  std::vector<float> xb(static_cast<size_t>(B) * d_), hb(static_cast<size_t>(B) * hidden_),
      zb(static_cast<size_t>(B) * experts_), dh(static_cast<size_t>(B) * hidden_);
  std::vector<int32_t> idb(static_cast<size_t>(B) * k);
  int64_t step = 0;
  double last_loss = 0;
  for (int epoch = 0; epoch < t.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    double loss = 0;
    for (int64_t start = 0; start < n; start += B) {
      const int m = static_cast<int>(std::min<int64_t>(B, n - start));
      for (int i = 0; i < m; ++i) {
        const int64_t s = order[static_cast<size_t>(start + i)];
        std::copy(x + s * d_, x + (s + 1) * d_, xb.begin() + static_cast<int64_t>(i) * d_);
        std::copy(ids + s * k, ids + (s + 1) * k, idb.begin() + static_cast<int64_t>(i) * k);
      }
      // Forward.
      for (int i = 0; i < m; ++i)
        std::copy(b1_.begin(), b1_.end(), hb.begin() + static_cast<int64_t>(i) * hidden_);
      Gemm(false, true, m, hidden_, d_, xb.data(), w1_.data(), hb.data(), true);
      for (int64_t i = 0; i < static_cast<int64_t>(m) * hidden_; ++i)
        hb[static_cast<size_t>(i)] = std::max(hb[static_cast<size_t>(i)], 0.0f);
      for (int i = 0; i < m; ++i)
        std::copy(b2_.begin(), b2_.end(), zb.begin() + static_cast<int64_t>(i) * experts_);
      Gemm(false, true, m, experts_, hidden_, hb.data(), w2_.data(), zb.data(), true);
      loss += SoftmaxCrossEntropy(zb.data(), m, experts_, idb.data(), k);
      // dL/dz = softmax − target (target: 1/k on each routed expert), averaged over the batch.
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < k; ++j)
          zb[static_cast<size_t>(i) * experts_ + idb[static_cast<size_t>(i) * k + j]] -=
              1.0f / static_cast<float>(k);
      const float inv = 1.0f / static_cast<float>(m);
      for (int64_t i = 0; i < static_cast<int64_t>(m) * experts_; ++i)
        zb[static_cast<size_t>(i)] *= inv;
      // Backward.
      MlpBackward(m, d_, hidden_, experts_, xb.data(), hb.data(), w2_.data(), zb.data(), dh.data(),
                  gw1.data(), gb1.data(), gw2.data(), gb2.data());
      ++step;
      aw1.Step(w1_, gw1, t.learning_rate, step);
      ab1.Step(b1_, gb1, t.learning_rate, step);
      aw2.Step(w2_, gw2, t.learning_rate, step);
      ab2.Step(b2_, gb2, t.learning_rate, step);
    }
    last_loss = n > 0 ? loss / static_cast<double>(n) : 0;
  }
  return last_loss;
}

PredictorScore ExpertPredictorMlp::Evaluate(const float* x, const int32_t* ids, int64_t n,
                                            int k) const {
  PredictorScore s;
  s.samples = n;
  if (n == 0) return s;
  std::vector<float> z(static_cast<size_t>(n) * experts_);
  Forward(x, n, z.data());
  double hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int32_t> top = TopKIndices(z.data() + i * experts_, experts_, k);
    for (int j = 0; j < k; ++j)
      hits += std::count(top.begin(), top.end(), ids[i * k + j]) > 0 ? 1 : 0;
  }
  s.loss = SoftmaxCrossEntropy(z.data(), n, experts_, ids, k) / static_cast<double>(n);
  s.accuracy = hits / static_cast<double>(n * k);
  return s;
}

void ExpertPredictorMlp::Save(StateWriter& out) const {
  out.I64(d_);
  out.I64(hidden_);
  out.I64(experts_);
  out.Floats(w1_);
  out.Floats(b1_);
  out.Floats(w2_);
  out.Floats(b2_);
}

void ExpertPredictorMlp::Load(StateReader& in) {
  const int64_t d = in.I64(), hidden = in.I64(), experts = in.I64();
  Check(d >= 0 && d < (1 << 20) && hidden >= 0 && hidden < (1 << 20) && experts >= 0 &&
            experts < (1 << 20),
        in.origin(), ": expert predictor of impossible shape");
  d_ = static_cast<int>(d);
  hidden_ = static_cast<int>(hidden);
  experts_ = static_cast<int>(experts);
  w1_ = in.Floats();
  b1_ = in.Floats();
  w2_ = in.Floats();
  b2_ = in.Floats();
  Check(w1_.size() == static_cast<size_t>(hidden * d) &&
            b1_.size() == static_cast<size_t>(hidden) &&
            w2_.size() == static_cast<size_t>(experts * hidden) &&
            b2_.size() == static_cast<size_t>(experts),
        in.origin(), ": expert predictor weights do not match its shape");
  for (const auto* w : {&w1_, &b1_, &w2_, &b2_})
    for (float v : *w) Check(std::isfinite(v), in.origin(), ": expert predictor weight not finite");
}

}  // namespace moex::policy

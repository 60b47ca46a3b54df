#include "policy/expertflow/expertflow_predictor.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"
#include "policy/common/mlp_training.h"

namespace moex::policy {

namespace {

// Binary cross-entropy of logit z against y ∈ {0, 1}, computed stably.
double Bce(float z, bool y) {
  const double x = z;
  return std::max(x, 0.0) - (y ? x : 0.0) + std::log1p(std::exp(-std::abs(x)));
}

float Sigmoid(float z) {
  return 1.0f / (1.0f + std::exp(-z));
}

// Adam with decoupled weight decay (AdamW). `rows`, when given, limits the update to those
// rows of `row_width` values (lazy embedding updates: untouched rows keep their moments).
struct AdamW {
  std::vector<float> m, v;
  explicit AdamW(size_t n) : m(n, 0), v(n, 0) {}
  void Update(float* w, const float* g, size_t i, double lr, double wd, double c1, double c2) {
    constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    m[i] = static_cast<float>(b1 * m[i] + (1 - b1) * g[i]);
    v[i] = static_cast<float>(b2 * v[i] + (1 - b2) * g[i] * g[i]);
    w[i] -= static_cast<float>(lr * ((m[i] / c1) / (std::sqrt(v[i] / c2) + eps) + wd * w[i]));
  }
  void Step(std::vector<float>& w, const std::vector<float>& g, double lr, double wd, int64_t t) {
    const double c1 = 1 - std::pow(0.9, static_cast<double>(t));
    const double c2 = 1 - std::pow(0.999, static_cast<double>(t));
    for (size_t i = 0; i < w.size(); ++i) Update(w.data(), g.data(), i, lr, wd, c1, c2);
  }
};

}  // namespace

RoutingPath TopKPath(const float* logits, int layers, int experts, int k) {
  RoutingPath path(layers, experts);
  std::vector<int32_t> idx(static_cast<size_t>(experts));
  k = std::clamp(k, 0, experts);
  for (int l = 0; l < layers; ++l) {
    const float* row = logits + static_cast<int64_t>(l) * experts;
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int j = 0; j < k; ++j) path.Set(l, idx[static_cast<size_t>(j)]);
  }
  return path;
}

RoutingPath ThresholdPath(const float* logits, int layers, int experts, double threshold) {
  RoutingPath path(layers, experts);
  const float cut = static_cast<float>(std::log(threshold / (1 - threshold)));
  for (int l = 0; l < layers; ++l)
    for (int e = 0; e < experts; ++e)
      if (logits[static_cast<int64_t>(l) * experts + e] >= cut) path.Set(l, e);
  return path;
}

RoutingPathPredictor::RoutingPathPredictor(int vocab, int dim, int hidden, int layers, int experts,
                                           uint64_t seed)
    : vocab_(vocab), dim_(dim), hidden_(hidden), layers_(layers), experts_(experts) {
  Check(vocab > 1 && dim > 0 && hidden > 0 && layers > 0 && experts > 1,
        "routing-path predictor of invalid shape: vocab ", vocab, ", dim ", dim, ", hidden ",
        hidden, ", ", layers, " layers of ", experts, " experts");
  std::mt19937_64 rng(seed);
  auto init = [&rng](std::vector<float>& w, size_t n, float scale) {
    std::normal_distribution<float> normal(0, scale);
    w.resize(n);
    for (float& x : w) x = normal(rng);
  };
  const int in = kSlots * dim;
  init(emb_, static_cast<size_t>(vocab) * dim, 1.0f);
  init(w1_, static_cast<size_t>(hidden) * in, std::sqrt(2.0f / static_cast<float>(in)));
  init(w2_, static_cast<size_t>(layers) * experts * hidden,
       std::sqrt(1.0f / static_cast<float>(hidden)));
  b1_.assign(static_cast<size_t>(hidden), 0);
  b2_.assign(static_cast<size_t>(layers) * experts, 0);
}

int64_t RoutingPathPredictor::parameters() const {
  return static_cast<int64_t>(emb_.size() + w1_.size() + b1_.size() + w2_.size() + b2_.size());
}

int32_t RoutingPathPredictor::Clamp(int32_t token) const {
  return token >= 0 && token < vocab_ - 1 ? token : vocab_ - 1;
}

RequestContext RoutingPathPredictor::Begin(const int32_t* prompt, int64_t n) const {
  Check(!empty(), "the routing-path predictor is not trained");
  RequestContext ctx;
  ctx.prompt_mean.assign(static_cast<size_t>(dim_), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = emb_.data() + static_cast<int64_t>(Clamp(prompt[i])) * dim_;
    for (int j = 0; j < dim_; ++j) ctx.prompt_mean[static_cast<size_t>(j)] += row[j];
  }
  if (n > 0)
    for (float& v : ctx.prompt_mean) v /= static_cast<float>(n);
  return ctx;
}

void RoutingPathPredictor::Features(const RequestContext& ctx, int32_t token, float* x) const {
  const int32_t ids[3] = {token, ctx.prev1, ctx.prev2};
  for (int s = 0; s < 3; ++s) {
    float* out = x + static_cast<int64_t>(s) * dim_;
    if (ids[s] < 0) {
      std::fill(out, out + dim_, 0.0f);
    } else {
      const float* row = emb_.data() + static_cast<int64_t>(Clamp(ids[s])) * dim_;
      std::copy(row, row + dim_, out);
    }
  }
  float* mean = x + 3 * static_cast<int64_t>(dim_);
  if (ctx.prompt_mean.size() == static_cast<size_t>(dim_))
    std::copy(ctx.prompt_mean.begin(), ctx.prompt_mean.end(), mean);
  else
    std::fill(mean, mean + dim_, 0.0f);
}

void RoutingPathPredictor::Step(RequestContext* ctx, int32_t token, float* logits) const {
  // Through Predict, so one token scores alike alone and in a batch.
  Predict({*ctx}, {token}, logits);
  Advance(ctx, token);
}

void RoutingPathPredictor::Predict(const std::vector<RequestContext>& contexts,
                                   const std::vector<int32_t>& tokens, float* logits) const {
  Check(!empty(), "the routing-path predictor is not trained");
  Check(contexts.size() == tokens.size(), "routing-path predictor: ", contexts.size(),
        " contexts for ", tokens.size(), " tokens");
  const int in = kSlots * dim_, out = layers_ * experts_;
  const int n = static_cast<int>(tokens.size());
  if (n == 0) return;
  std::vector<float> x(static_cast<size_t>(n) * in), h(static_cast<size_t>(n) * hidden_);
  for (int i = 0; i < n; ++i) {
    Features(contexts[static_cast<size_t>(i)], tokens[static_cast<size_t>(i)],
             x.data() + static_cast<int64_t>(i) * in);
    std::copy(b1_.begin(), b1_.end(), h.begin() + static_cast<int64_t>(i) * hidden_);
    std::copy(b2_.begin(), b2_.end(), logits + static_cast<int64_t>(i) * out);
  }
  // Row by row: BLAS may take another kernel (and summation order) for one row than for
  // several (OpenBLAS on AVX2 does), and a token must score alike alone and in a batch.
  for (int i = 0; i < n; ++i) {
    float* hi = h.data() + static_cast<int64_t>(i) * hidden_;
    Gemm(false, true, 1, hidden_, in, x.data() + static_cast<int64_t>(i) * in, w1_.data(), hi,
         true);
    for (int j = 0; j < hidden_; ++j) hi[j] = std::max(hi[j], 0.0f);
    Gemm(false, true, 1, out, hidden_, hi, w2_.data(), logits + static_cast<int64_t>(i) * out,
         true);
  }
}

double RoutingPathPredictor::Train(const std::vector<PathSequence>& sequences,
                                   const PathTraining& t,
                                   const std::function<void(int64_t, int64_t)>& progress) {
  Check(!empty(), "the routing-path predictor has no shape");
  Check(t.batch > 0 && t.epochs > 0, "predictor training needs batch and epochs > 0");
  // Every routed token is a sample: (sequence, position).
  std::vector<std::pair<uint32_t, uint32_t>> samples;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const PathSequence& q = sequences[s];
    Check(q.paths.size() == q.tokens.size(), "predictor training: a sequence of ", q.tokens.size(),
          " tokens has ", q.paths.size(), " paths");
    for (size_t i = 0; i < q.tokens.size(); ++i) {
      if (q.paths[i].layers() == 0) continue;
      Check(q.paths[i].layers() == layers_ && q.paths[i].experts() == experts_,
            "predictor training: a path of ", q.paths[i].layers(), " x ", q.paths[i].experts(),
            " for a predictor of ", layers_, " x ", experts_);
      samples.push_back({static_cast<uint32_t>(s), static_cast<uint32_t>(i)});
    }
  }
  const int64_t n = static_cast<int64_t>(samples.size());
  if (n == 0) return 0;
  const int in = kSlots * dim_, out = layers_ * experts_, B = t.batch;
  const int64_t steps_per_epoch = (n + B - 1) / B, total_steps = steps_per_epoch * t.epochs;
  std::mt19937_64 rng(t.seed);
  AdamW aemb(emb_.size()), aw1(w1_.size()), ab1(b1_.size()), aw2(w2_.size()), ab2(b2_.size());
  std::vector<float> gw1(w1_.size()), gb1(b1_.size()), gw2(w2_.size()), gb2(b2_.size());
  std::vector<float> x(static_cast<size_t>(B) * in), h(static_cast<size_t>(B) * hidden_),
      z(static_cast<size_t>(B) * out), dh(static_cast<size_t>(B) * hidden_),
      dx(static_cast<size_t>(B) * in);
  // Embedding gradients of the rows a minibatch touches, in first-touch order.
  std::vector<float> gemb(emb_.size(), 0.0f);
  std::vector<char> touched(static_cast<size_t>(vocab_), 0);
  std::vector<int32_t> rows;
  auto add_row = [&](int32_t row, const float* g, float scale) {
    if (!touched[static_cast<size_t>(row)]) {
      touched[static_cast<size_t>(row)] = 1;
      rows.push_back(row);
    }
    float* dst = gemb.data() + static_cast<int64_t>(row) * dim_;
    for (int j = 0; j < dim_; ++j) dst[j] += scale * g[j];
  };
  int64_t step = 0;
  double last_loss = 0;
  for (int epoch = 0; epoch < t.epochs; ++epoch) {
    std::shuffle(samples.begin(), samples.end(), rng);
    double loss = 0;
    for (int64_t start = 0; start < n; start += B) {
      const int m = static_cast<int>(std::min<int64_t>(B, n - start));
      // Forward.
      for (int i = 0; i < m; ++i) {
        const auto [s, pos] = samples[static_cast<size_t>(start + i)];
        const PathSequence& q = sequences[s];
        RequestContext ctx = Begin(q.prompt.data(), static_cast<int64_t>(q.prompt.size()));
        ctx.prev1 = pos >= 1 ? q.tokens[pos - 1] : -1;
        ctx.prev2 = pos >= 2 ? q.tokens[pos - 2] : -1;
        Features(ctx, q.tokens[pos], x.data() + static_cast<int64_t>(i) * in);
        std::copy(b1_.begin(), b1_.end(), h.begin() + static_cast<int64_t>(i) * hidden_);
        std::copy(b2_.begin(), b2_.end(), z.begin() + static_cast<int64_t>(i) * out);
      }
      Gemm(false, true, m, hidden_, in, x.data(), w1_.data(), h.data(), true);
      for (int64_t i = 0; i < static_cast<int64_t>(m) * hidden_; ++i)
        h[static_cast<size_t>(i)] = std::max(h[static_cast<size_t>(i)], 0.0f);
      Gemm(false, true, m, out, hidden_, h.data(), w2_.data(), z.data(), true);
      // Per-layer BCE, averaged over bits and samples: dL/dz = (σ(z) − y) / (m · out).
      const float scale = 1.0f / static_cast<float>(m) / static_cast<float>(out);
      for (int i = 0; i < m; ++i) {
        const auto [s, pos] = samples[static_cast<size_t>(start + i)];
        const RoutingPath& y = sequences[s].paths[pos];
        float* zi = z.data() + static_cast<int64_t>(i) * out;
        for (int l = 0; l < layers_; ++l)
          for (int e = 0; e < experts_; ++e) {
            float& v = zi[l * experts_ + e];
            const bool active = y.Test(l, e);
            loss += Bce(v, active);
            v = (Sigmoid(v) - (active ? 1.0f : 0.0f)) * scale;
          }
      }
      // Backward.
      MlpBackward(m, in, hidden_, out, x.data(), h.data(), w2_.data(), z.data(), dh.data(),
                  gw1.data(), gb1.data(), gw2.data(), gb2.data());
      Gemm(false, false, m, in, hidden_, dh.data(), w1_.data(), dx.data(), false);
      for (int i = 0; i < m; ++i) {
        const auto [s, pos] = samples[static_cast<size_t>(start + i)];
        const PathSequence& q = sequences[s];
        const float* g = dx.data() + static_cast<int64_t>(i) * in;
        add_row(Clamp(q.tokens[pos]), g, 1.0f);
        if (pos >= 1) add_row(Clamp(q.tokens[pos - 1]), g + dim_, 1.0f);
        if (pos >= 2) add_row(Clamp(q.tokens[pos - 2]), g + 2 * dim_, 1.0f);
        const float share = q.prompt.empty() ? 0.0f : 1.0f / static_cast<float>(q.prompt.size());
        for (int32_t p : q.prompt) add_row(Clamp(p), g + 3 * dim_, share);
      }
      ++step;
      const double lr =
          t.learning_rate * 0.5 *
          (1 + std::cos(M_PI * static_cast<double>(step - 1) / static_cast<double>(total_steps)));
      aw1.Step(w1_, gw1, lr, t.weight_decay, step);
      ab1.Step(b1_, gb1, lr, t.weight_decay, step);
      aw2.Step(w2_, gw2, lr, t.weight_decay, step);
      ab2.Step(b2_, gb2, lr, t.weight_decay, step);
      const double c1 = 1 - std::pow(0.9, static_cast<double>(step));
      const double c2 = 1 - std::pow(0.999, static_cast<double>(step));
      for (int32_t row : rows) {
        const size_t base = static_cast<size_t>(row) * static_cast<size_t>(dim_);
        for (int j = 0; j < dim_; ++j)
          aemb.Update(emb_.data(), gemb.data(), base + static_cast<size_t>(j), lr, t.weight_decay,
                      c1, c2);
        std::fill(gemb.begin() + static_cast<std::ptrdiff_t>(base),
                  gemb.begin() + static_cast<std::ptrdiff_t>(base) + dim_, 0.0f);
        touched[static_cast<size_t>(row)] = 0;
      }
      rows.clear();
      if (progress) progress(step, total_steps);
    }
    last_loss = loss / static_cast<double>(n) / static_cast<double>(out);
  }
  return last_loss;
}

double RoutingPathPredictor::Loss(const std::vector<PathSequence>& sequences) const {
  std::vector<float> logits(static_cast<size_t>(layers_) * experts_);
  double loss = 0;
  int64_t bits = 0;
  for (const PathSequence& q : sequences) {
    RequestContext ctx = Begin(q.prompt.data(), static_cast<int64_t>(q.prompt.size()));
    for (size_t i = 0; i < q.tokens.size(); ++i) {
      Step(&ctx, q.tokens[i], logits.data());
      if (i >= q.paths.size() || q.paths[i].layers() != layers_) continue;
      for (int l = 0; l < layers_; ++l)
        for (int e = 0; e < experts_; ++e)
          loss += Bce(logits[static_cast<size_t>(l) * experts_ + e], q.paths[i].Test(l, e));
      bits += static_cast<int64_t>(layers_) * experts_;
    }
  }
  return bits ? loss / static_cast<double>(bits) : 0;
}

void RoutingPathPredictor::Save(StateWriter& out) const {
  out.I64(vocab_);
  out.I64(dim_);
  out.I64(hidden_);
  out.I64(layers_);
  out.I64(experts_);
  out.Floats(emb_);
  out.Floats(w1_);
  out.Floats(b1_);
  out.Floats(w2_);
  out.Floats(b2_);
}

void RoutingPathPredictor::Load(StateReader& in) {
  const int64_t vocab = in.I64(), dim = in.I64(), hidden = in.I64(), layers = in.I64(),
                experts = in.I64();
  auto ok = [](int64_t v) { return v >= 0 && v < (1 << 24); };
  Check(ok(vocab) && ok(dim) && ok(hidden) && ok(layers) && ok(experts) && dim <= 4096 &&
            hidden <= 65536,
        in.origin(), ": routing-path predictor of impossible shape");
  RoutingPathPredictor p;
  p.vocab_ = static_cast<int>(vocab);
  p.dim_ = static_cast<int>(dim);
  p.hidden_ = static_cast<int>(hidden);
  p.layers_ = static_cast<int>(layers);
  p.experts_ = static_cast<int>(experts);
  p.emb_ = in.Floats();
  p.w1_ = in.Floats();
  p.b1_ = in.Floats();
  p.w2_ = in.Floats();
  p.b2_ = in.Floats();
  Check(p.emb_.size() == static_cast<size_t>(vocab * dim) &&
            p.w1_.size() == static_cast<size_t>(hidden * kSlots * dim) &&
            p.b1_.size() == static_cast<size_t>(hidden) &&
            p.w2_.size() == static_cast<size_t>(layers * experts * hidden) &&
            p.b2_.size() == static_cast<size_t>(layers * experts),
        in.origin(), ": routing-path predictor weights do not match its shape");
  for (const auto* w : {&p.emb_, &p.w1_, &p.b1_, &p.w2_, &p.b2_})
    for (float v : *w)
      Check(std::isfinite(v), in.origin(), ": routing-path predictor weight not finite");
  *this = std::move(p);
}

}  // namespace moex::policy

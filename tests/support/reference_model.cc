#include "support/reference_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "model/tensor_names.h"

namespace moex::testing {

namespace {

using Vec = std::vector<double>;

// Dequantises a whole tensor to double with its own scalar code (no engine kernels).
Vec ToDouble(const TensorView& t) {
  const int64_t n = t.numel();
  Vec out(static_cast<size_t>(n));
  if (IsBlockQuantized(t.dtype) && t.dtype != DType::kQ8_0) {
    // Other block formats: core's decoders (checked against gguf-py in quant_format_test).
    std::vector<float> wide(static_cast<size_t>(n));
    ConvertToF32(t.data, t.dtype, n, wide.data());
    std::copy(wide.begin(), wide.end(), out.begin());
    return out;
  }
  const uint8_t* p = reinterpret_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        out[static_cast<size_t>(i)] = f;
        break;
      }
      case DType::kBF16: {
        uint32_t bits = static_cast<uint32_t>(p[2 * i] | (p[2 * i + 1] << 8)) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        out[static_cast<size_t>(i)] = f;
        break;
      }
      case DType::kF16:
        out[static_cast<size_t>(i)] =
            F16ToF32(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
        break;
      case DType::kQ8_0: {
        const int64_t block = i / kQ8BlockSize;
        const uint8_t* b = p + block * kQ8BlockBytes;
        const double scale = F16ToF32(static_cast<uint16_t>(b[0] | (b[1] << 8)));
        out[static_cast<size_t>(i)] = scale * static_cast<int8_t>(b[2 + i % kQ8BlockSize]);
        break;
      }
      default:
        Fail("internal: ToDouble on ", DTypeName(t.dtype));
    }
  }
  return out;
}

struct Ref {
  const ModelConfig& c;
  const WeightSource& w;
  TensorNames names;

  Vec Get(const std::string& name) const { return ToDouble(w.Get(name)); }
  Vec Layer(int l, const std::string& name) const { return Get(TensorNames::Layer(l, name)); }
  // A residual-stream or q/k norm's weight: zero-centred norms (Qwen3-Next) compute with 1 + w.
  Vec NormWeight(const std::string& full_name) const {
    Vec v = Get(full_name);
    for (double& e : v) e += c.norm_weight_offset;
    return v;
  }

  // y = W x for W [rows, cols] row-major.
  static Vec MatVec(const Vec& W, const Vec& x, int64_t rows) {
    const int64_t cols = static_cast<int64_t>(x.size());
    Vec y(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t i = 0; i < cols; ++i) s += W[static_cast<size_t>(r * cols + i)] * x[static_cast<size_t>(i)];
      y[static_cast<size_t>(r)] = s;
    }
    return y;
  }
  Vec RmsNorm(const Vec& x, const Vec& weight, int64_t offset, int64_t dim) const {
    double ms = 0;
    for (int64_t i = 0; i < dim; ++i) ms += x[static_cast<size_t>(offset + i)] * x[static_cast<size_t>(offset + i)];
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(dim) + c.rms_norm_eps);
    Vec y(static_cast<size_t>(dim));
    for (int64_t i = 0; i < dim; ++i)
      y[static_cast<size_t>(i)] = x[static_cast<size_t>(offset + i)] * inv * weight[static_cast<size_t>(i)];
    return y;
  }
  // nn.LayerNorm: (x - mean) / sqrt(biased variance + eps) * weight + bias.
  Vec LayerNorm(const Vec& x, const Vec& weight, const Vec& bias) const {
    const size_t dim = x.size();
    double mean = 0;
    for (double v : x) mean += v;
    mean /= static_cast<double>(dim);
    double var = 0;
    for (double v : x) var += (v - mean) * (v - mean);
    var /= static_cast<double>(dim);
    const double inv = 1.0 / std::sqrt(var + c.rms_norm_eps);
    Vec y(dim);
    for (size_t i = 0; i < dim; ++i) y[i] = (x[i] - mean) * inv * weight[i] + bias[i];
    return y;
  }
  // The residual-stream norm of this architecture (bias is empty for RMSNorm).
  Vec Norm(const Vec& x, const Vec& weight, const Vec& bias) const {
    if (c.norm == NormKind::kLayerNorm) return LayerNorm(x, weight, bias);
    return RmsNorm(x, weight, 0, static_cast<int64_t>(x.size()));
  }
  static double Silu(double v) { return v / (1.0 + std::exp(-v)); }
  Vec SwiGlu(const Vec& gate, const Vec& up, const Vec& down, const Vec& x, int64_t f) const {
    Vec g = MatVec(gate, x, f), u = MatVec(up, x, f);
    for (int64_t i = 0; i < f; ++i) g[static_cast<size_t>(i)] = Silu(g[static_cast<size_t>(i)]) * u[static_cast<size_t>(i)];
    return MatVec(down, g, c.hidden_size);
  }
  // HF rotate_half RoPE; the angle is rounded through f32 exactly as HF computes it.
  // LongRoPE: inv_freq_i = 1 / (factor_i * theta^(2i/d)), cos and sin times mscale, with
  // the long set iff the pass computing this rotation ends beyond the original length.
  // Partial rotary (GLM-4.5): only each head's first rot = RotaryDim() values turn, with
  // frequencies theta^(-2i/rot); the rest pass through (HF's q_rot / q_pass split).
  void Rope(Vec& x, int64_t heads, int64_t pos, int64_t pass_end) const {
    const int64_t hd = c.head_dim, rot = c.RotaryDim(), half = rot / 2;
    const bool use_long = c.longrope && pass_end > c.longrope->original_max_position_embeddings;
    const std::vector<float>* factors = nullptr;
    double mscale = 1.0;
    if (c.longrope) {
      factors = use_long ? &c.longrope->long_factor : &c.longrope->short_factor;
      mscale = use_long ? c.longrope->long_mscale : c.longrope->short_mscale;
    }
    // HF's generic YaRN (gpt-oss), written from _compute_yarn_parameters: the ramp between
    // the beta_fast and beta_slow correction dimensions, floored/ceiled only with truncate,
    // and cos/sin times 0.1 ln(factor) + 1.
    double low = 0, high = 1;
    if (c.yarn) {
      const Yarn& y = *c.yarn;
      auto correction = [&](double rot) {
        return hd * std::log(y.original_max_position_embeddings / (rot * 2 * M_PI)) /
               (2 * std::log(static_cast<double>(c.rope_theta)));
      };
      low = correction(y.beta_fast);
      high = correction(y.beta_slow);
      if (y.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(hd - 1));
      if (low == high) high += 0.001;
      mscale = y.factor <= 1 ? 1.0 : 0.1 * std::log(static_cast<double>(y.factor)) + 1.0;
    }
    for (int64_t i = 0; i < half; ++i) {
      const float base = std::pow(c.rope_theta, static_cast<float>(2 * i) / static_cast<float>(rot));
      float inv = 1.0f / (factors ? (*factors)[static_cast<size_t>(i)] * base : base);
      if (c.yarn) {
        const float inter = 1.0f / (c.yarn->factor * base);
        const float keep = 1.0f - static_cast<float>(std::clamp((i - low) / (high - low), 0.0, 1.0));
        inv = inter * (1.0f - keep) + inv * keep;
      }
      const float angle = static_cast<float>(pos) * inv;
      const double cs = std::cos(static_cast<double>(angle)) * mscale;
      const double sn = std::sin(static_cast<double>(angle)) * mscale;
      for (int64_t h = 0; h < heads; ++h) {
        double& a = x[static_cast<size_t>(h * hd + i)];
        double& b = x[static_cast<size_t>(h * hd + i + half)];
        const double a0 = a, b0 = b;
        a = a0 * cs - b0 * sn;
        b = b0 * cs + a0 * sn;
      }
    }
  }

  // DeepSeek's RoPE on the qk_rope_head_dim values at x[offset..]: HF first de-interleaves
  // them (even entries, then odd), then applies rotate_half with YaRN's frequencies
  // (config.yarn, else plain) and magnitude, as DeepseekV2YarnRotaryEmbedding.
  void RopeDeepseek(Vec& x, int64_t offset, int64_t pos) const {
    const int64_t dim = c.head_dim, half = dim / 2;
    Vec perm(static_cast<size_t>(dim));
    for (int64_t i = 0; i < half; ++i) {
      perm[static_cast<size_t>(i)] = x[static_cast<size_t>(offset + 2 * i)];
      perm[static_cast<size_t>(half + i)] = x[static_cast<size_t>(offset + 2 * i + 1)];
    }
    auto yarn_mscale = [](double scale, double m) {
      return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
    };
    double low = 0, high = 1, mscale = 1;
    if (c.yarn) {
      const auto& y = *c.yarn;
      auto correction = [&](double rot) {
        return dim * std::log(y.original_max_position_embeddings / (rot * 2 * M_PI)) /
               (2 * std::log(static_cast<double>(c.rope_theta)));
      };
      low = std::max(std::floor(correction(y.beta_fast)), 0.0);
      high = std::min(std::ceil(correction(y.beta_slow)), static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      mscale = yarn_mscale(y.factor, y.mscale) / yarn_mscale(y.factor, y.mscale_all_dim);
    }
    for (int64_t i = 0; i < half; ++i) {
      const float base =
          std::pow(c.rope_theta, static_cast<float>(2 * i) / static_cast<float>(dim));
      float inv = 1.0f / base;
      if (c.yarn) {
        const float extra = 1.0f / base, inter = 1.0f / (c.yarn->factor * base);
        const float keep = 1.0f - static_cast<float>(std::clamp((i - low) / (high - low), 0.0, 1.0));
        inv = inter * (1.0f - keep) + extra * keep;
      }
      const float angle = static_cast<float>(pos) * inv;
      const double cs = std::cos(static_cast<double>(angle)) * mscale;
      const double sn = std::sin(static_cast<double>(angle)) * mscale;
      const double a = perm[static_cast<size_t>(i)], b = perm[static_cast<size_t>(half + i)];
      x[static_cast<size_t>(offset + i)] = a * cs - b * sn;
      x[static_cast<size_t>(offset + half + i)] = b * cs + a * sn;
    }
  }
};

// DeepSeek-V2/V3 MoEGate in double: scores, optional bias and groups, top-k, weights.
void ReferenceGroupedTopK(const ModelConfig& c, const Vec& logits, const Vec& bias,
                          std::vector<int>* ids, Vec* weights) {
  const size_t E = logits.size();
  Vec s(E);
  if (c.scoring_func == ScoringFunc::kSigmoid) {
    for (size_t e = 0; e < E; ++e) s[e] = 1.0 / (1.0 + std::exp(-logits[e]));
  } else {
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (size_t e = 0; e < E; ++e) sum += (s[e] = std::exp(logits[e] - mx));
    for (auto& v : s) v /= sum;
  }
  Vec choice = s;
  if (c.topk_method == TopKMethod::kNoauxTc && !bias.empty())
    for (size_t e = 0; e < E; ++e) choice[e] += bias[e];
  if (c.topk_method != TopKMethod::kGreedy && c.n_group > 1) {
    const size_t per = E / static_cast<size_t>(c.n_group);
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < c.n_group; ++g) {
      Vec members(choice.begin() + static_cast<ptrdiff_t>(g * per),
                  choice.begin() + static_cast<ptrdiff_t>((g + 1) * per));
      std::sort(members.rbegin(), members.rend());
      const double score =
          c.topk_method == TopKMethod::kNoauxTc ? members[0] + members[1] : members[0];
      groups.push_back({-score, g});
    }
    std::sort(groups.begin(), groups.end());
    std::vector<bool> keep(static_cast<size_t>(c.n_group), false);
    for (int g = 0; g < c.topk_group; ++g) keep[static_cast<size_t>(groups[static_cast<size_t>(g)].second)] = true;
    for (size_t e = 0; e < E; ++e)
      if (!keep[e / per]) choice[e] = 0.0;
  }
  std::vector<int> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return choice[static_cast<size_t>(a)] > choice[static_cast<size_t>(b)]; });
  const int K = c.num_experts_per_tok;
  const bool renorm = c.norm_topk_prob && K > 1;
  double sum = 0;
  for (int k = 0; k < K; ++k) sum += s[static_cast<size_t>(order[static_cast<size_t>(k)])];
  ids->assign(order.begin(), order.begin() + K);
  weights->clear();
  for (int k = 0; k < K; ++k) {
    double w = s[static_cast<size_t>(order[static_cast<size_t>(k)])];
    if (renorm) w /= sum + 1e-20;
    if (c.scale_normalised_weights || !renorm) w *= c.routed_scaling_factor;
    weights->push_back(w);
  }
}

// One MLA layer's attention output (before o_proj's residual add) for every token, written
// as HF's DeepseekV2Attention computes it: K and V decompressed from the latent.
std::vector<Vec> ReferenceMla(const Ref& ref, int l, const std::vector<Vec>& x) {
  const ModelConfig& c = ref.c;
  const TensorNames& n = ref.names;
  const Mla& m = *c.mla;
  const int64_t H = c.num_heads, nope = m.qk_nope_head_dim, R = m.qk_rope_head_dim;
  const int64_t qk = m.qk_head_dim(), V = m.v_head_dim, lat = m.kv_lora_rank;
  const int64_t T = static_cast<int64_t>(x.size());
  Vec Wq, Wqa, qa_norm, Wqb;
  if (m.q_lora_rank > 0) {
    Wqa = ref.Layer(l, n.q_a);
    qa_norm = ref.Layer(l, n.q_a_norm);
    Wqb = ref.Layer(l, n.q_b);
  } else {
    Wq = ref.Layer(l, n.q);
  }
  const Vec Wkva = ref.Layer(l, n.kv_a), kv_norm = ref.Layer(l, n.kv_a_norm),
            Wkvb = ref.Layer(l, n.kv_b), Wo = ref.Layer(l, n.o);
  std::vector<Vec> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)), v(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const Vec& xt = x[static_cast<size_t>(t)];
    Vec qt;
    if (m.q_lora_rank > 0) {
      const Vec a = Ref::MatVec(Wqa, xt, m.q_lora_rank);
      qt = Ref::MatVec(Wqb, ref.RmsNorm(a, qa_norm, 0, m.q_lora_rank), H * qk);
    } else {
      qt = Ref::MatVec(Wq, xt, H * qk);
    }
    Vec kv = Ref::MatVec(Wkva, xt, lat + R);
    const Vec latent = ref.RmsNorm(kv, kv_norm, 0, lat);
    ref.RopeDeepseek(kv, lat, t);
    for (int64_t h = 0; h < H; ++h) ref.RopeDeepseek(qt, h * qk + nope, t);
    const Vec up = Ref::MatVec(Wkvb, latent, H * (nope + V));
    Vec kt(static_cast<size_t>(H * qk)), vt(static_cast<size_t>(H * V));
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < nope; ++i)
        kt[static_cast<size_t>(h * qk + i)] = up[static_cast<size_t>(h * (nope + V) + i)];
      for (int64_t i = 0; i < R; ++i)
        kt[static_cast<size_t>(h * qk + nope + i)] = kv[static_cast<size_t>(lat + i)];
      for (int64_t i = 0; i < V; ++i)
        vt[static_cast<size_t>(h * V + i)] = up[static_cast<size_t>(h * (nope + V) + nope + i)];
    }
    q[static_cast<size_t>(t)] = qt;
    k[static_cast<size_t>(t)] = kt;
    v[static_cast<size_t>(t)] = vt;
  }
  double scale = 1.0 / std::sqrt(static_cast<double>(qk));
  if (c.yarn && c.yarn->mscale_all_dim != 0) {
    const double ms = c.yarn->factor <= 1 ? 1.0 : 0.1 * c.yarn->mscale_all_dim * std::log(c.yarn->factor) + 1.0;
    scale *= ms * ms;
  }
  std::vector<Vec> out(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    Vec o(static_cast<size_t>(H * V), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      Vec s(static_cast<size_t>(t + 1));
      double mx = -1e300;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < qk; ++i)
          dot += q[static_cast<size_t>(t)][static_cast<size_t>(h * qk + i)] *
                 k[static_cast<size_t>(j)][static_cast<size_t>(h * qk + i)];
        s[static_cast<size_t>(j)] = dot * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int64_t j = 0; j <= t; ++j)
        for (int64_t i = 0; i < V; ++i)
          o[static_cast<size_t>(h * V + i)] +=
              s[static_cast<size_t>(j)] / sum * v[static_cast<size_t>(j)][static_cast<size_t>(h * V + i)];
    }
    out[static_cast<size_t>(t)] = Ref::MatVec(Wo, o, c.hidden_size);
  }
  return out;
}

// One Gated DeltaNet layer's output (before the residual add) for every token of x (the
// normed inputs), written from HF's Qwen3NextGatedDeltaNet with its token-by-token recurrence
// (torch_recurrent_gated_delta_rule) from a zero state.
std::vector<Vec> ReferenceGatedDeltaNet(const Ref& ref, int l, const std::vector<Vec>& x) {
  const ModelConfig& c = ref.c;
  const TensorNames& n = ref.names;
  const GatedDeltaNet& g = *c.delta_net;
  const int64_t nk = g.num_k_heads, nv = g.num_v_heads, dk = g.k_head_dim, dv = g.v_head_dim;
  const int64_t r = nv / nk, K = g.conv_kernel, key_dim = g.key_dim(), conv_dim = g.conv_dim();
  const int64_t T = static_cast<int64_t>(x.size());
  auto at = [](const Vec& v, int64_t i) { return v[static_cast<size_t>(i)]; };
  const bool grouped = ref.w.Find(TensorNames::Layer(l, n.gdn_qkvz)) != nullptr;
  const Vec Wqkvz = grouped ? ref.Layer(l, n.gdn_qkvz) : Vec{};
  const Vec Wqkv = grouped ? Vec{} : ref.Layer(l, n.gdn_qkv);
  const Vec Wz = grouped ? Vec{} : ref.Layer(l, n.gdn_z);
  // Qwen3-Next's grouped b/a, or Qwen3.5's b and a apart (then ba[t] = [b..., a...]).
  const bool split_ba = ref.w.Find(TensorNames::Layer(l, n.gdn_ba)) == nullptr;
  const Vec Wba = split_ba ? Vec{} : ref.Layer(l, n.gdn_ba);
  const Vec Wb = split_ba ? ref.Layer(l, n.gdn_b) : Vec{};
  const Vec Wa = split_ba ? ref.Layer(l, n.gdn_a) : Vec{};
  const Vec conv = ref.Layer(l, n.gdn_conv), dt_bias = ref.Layer(l, n.gdn_dt_bias),
            norm = ref.Layer(l, n.gdn_norm), Wout = ref.Layer(l, n.gdn_out);
  Vec A(static_cast<size_t>(nv));  // -exp(A_log), or llama.cpp's stored ssm_a.
  if (ref.w.Find(TensorNames::Layer(l, n.gdn_a_log)) != nullptr) {
    const Vec a_log = ref.Layer(l, n.gdn_a_log);
    for (int64_t h = 0; h < nv; ++h) A[static_cast<size_t>(h)] = -std::exp(at(a_log, h));
  } else {
    A = ref.Layer(l, n.gdn_neg_a);
  }
  // mixed[t] = [q (all k heads), k, v (all v heads)] and z[t] before the convolution.
  std::vector<Vec> mixed(static_cast<size_t>(T)), z(static_cast<size_t>(T)),
      ba(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const Vec& xt = x[static_cast<size_t>(t)];
    if (split_ba) {
      Vec b = Ref::MatVec(Wb, xt, nv);
      const Vec a = Ref::MatVec(Wa, xt, nv);
      b.insert(b.end(), a.begin(), a.end());
      ba[static_cast<size_t>(t)] = b;
    } else {
      ba[static_cast<size_t>(t)] = Ref::MatVec(Wba, xt, 2 * nv);
    }
    if (!grouped) {
      mixed[static_cast<size_t>(t)] = Ref::MatVec(Wqkv, xt, conv_dim);
      z[static_cast<size_t>(t)] = Ref::MatVec(Wz, xt, g.value_dim());
      continue;
    }
    // HF's fix_query_key_value_ordering: per key head [q, k, v (r heads), z (r heads)].
    const Vec p = Ref::MatVec(Wqkvz, xt, conv_dim + g.value_dim());
    Vec m(static_cast<size_t>(conv_dim)), zt(static_cast<size_t>(g.value_dim()));
    const int64_t group = 2 * dk + 2 * r * dv;
    for (int64_t h = 0; h < nk; ++h) {
      for (int64_t i = 0; i < dk; ++i) {
        m[static_cast<size_t>(h * dk + i)] = at(p, h * group + i);
        m[static_cast<size_t>(key_dim + h * dk + i)] = at(p, h * group + dk + i);
      }
      for (int64_t i = 0; i < r * dv; ++i) {
        m[static_cast<size_t>(2 * key_dim + h * r * dv + i)] = at(p, h * group + 2 * dk + i);
        zt[static_cast<size_t>(h * r * dv + i)] = at(p, h * group + 2 * dk + r * dv + i);
      }
    }
    mixed[static_cast<size_t>(t)] = m;
    z[static_cast<size_t>(t)] = zt;
  }
  std::vector<Vec> S(static_cast<size_t>(nv), Vec(static_cast<size_t>(dk * dv), 0.0));
  std::vector<Vec> out(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    // Causal depthwise convolution (zeros before the first token), then SiLU.
    Vec y(static_cast<size_t>(conv_dim), 0.0);
    for (int64_t ch = 0; ch < conv_dim; ++ch) {
      double s = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t src = t - (K - 1) + j;
        if (src >= 0) s += at(conv, ch * K + j) * at(mixed[static_cast<size_t>(src)], ch);
      }
      y[static_cast<size_t>(ch)] = Ref::Silu(s);
    }
    // l2norm(x) = x / sqrt(sum x^2 + 1e-6) per head; q then scaled by 1/sqrt(dk).
    for (int64_t h = 0; h < 2 * nk; ++h) {
      double ss = 0;
      for (int64_t i = 0; i < dk; ++i) ss += at(y, h * dk + i) * at(y, h * dk + i);
      const double inv =
          (h < nk ? 1.0 / std::sqrt(static_cast<double>(dk)) : 1.0) / std::sqrt(ss + 1e-6);
      for (int64_t i = 0; i < dk; ++i) y[static_cast<size_t>(h * dk + i)] *= inv;
    }
    Vec o(static_cast<size_t>(g.value_dim()));
    for (int64_t h = 0; h < nv; ++h) {
      // HF: repeat_interleave of q and k over the v heads (h / r); llama.cpp's qwen35moe
      // files: tiled (h % nk).
      const int64_t kh = g.tiled_v_heads ? h % nk : h / r;
      const Vec& bat = ba[static_cast<size_t>(t)];
      const double b = split_ba ? at(bat, h) : at(bat, (h / r) * 2 * r + h % r);
      const double a = split_ba ? at(bat, nv + h) : at(bat, (h / r) * 2 * r + r + h % r);
      const double beta = 1.0 / (1.0 + std::exp(-b));
      const double decay = std::exp(at(A, h) * std::log1p(std::exp(a + at(dt_bias, h))));
      Vec& st = S[static_cast<size_t>(h)];
      for (auto& e : st) e *= decay;
      for (int64_t j = 0; j < dv; ++j) {
        double mem = 0;
        for (int64_t i = 0; i < dk; ++i)
          mem += st[static_cast<size_t>(i * dv + j)] * at(y, key_dim + kh * dk + i);
        const double delta = (at(y, 2 * key_dim + h * dv + j) - mem) * beta;
        for (int64_t i = 0; i < dk; ++i)
          st[static_cast<size_t>(i * dv + j)] += at(y, key_dim + kh * dk + i) * delta;
      }
      // o = S^T q, RMSNorm over the head (its own weight), times silu(z).
      Vec oh(static_cast<size_t>(dv), 0.0);
      double ms = 0;
      for (int64_t j = 0; j < dv; ++j) {
        for (int64_t i = 0; i < dk; ++i)
          oh[static_cast<size_t>(j)] += st[static_cast<size_t>(i * dv + j)] * at(y, kh * dk + i);
        ms += oh[static_cast<size_t>(j)] * oh[static_cast<size_t>(j)];
      }
      const double inv = 1.0 / std::sqrt(ms / static_cast<double>(dv) + c.rms_norm_eps);
      for (int64_t j = 0; j < dv; ++j)
        o[static_cast<size_t>(h * dv + j)] = oh[static_cast<size_t>(j)] * inv * at(norm, j) *
                                             Ref::Silu(at(z[static_cast<size_t>(t)], h * dv + j));
    }
    out[static_cast<size_t>(t)] = Ref::MatVec(Wout, o, c.hidden_size);
  }
  return out;
}

// HF's fused gpt-oss expert tensors of layer l (gate_up_proj [E, d, 2F] with gate in the
// even columns, its bias [E, 2F], down_proj [E, F, d], its bias [E, d]). A GGUF has no
// fused tensors: they are rebuilt from its per-expert matrices (the layout llama.cpp's
// converter produces) so the arithmetic below stays HF's.
struct FusedExperts {
  Vec gate_up, gate_up_b, down, down_b;
};
FusedExperts GptOssFused(const Ref& ref, int l) {
  const ModelConfig& c = ref.c;
  const TensorNames& n = ref.names;
  const int64_t d = c.hidden_size, E = c.num_experts, F = c.moe_intermediate_size;
  if (ref.w.Find(TensorNames::Layer(l, "mlp.experts.gate_up_proj")) != nullptr)
    return {ref.Layer(l, "mlp.experts.gate_up_proj"), ref.Layer(l, "mlp.experts.gate_up_proj_bias"),
            ref.Layer(l, "mlp.experts.down_proj"), ref.Layer(l, "mlp.experts.down_proj_bias")};
  FusedExperts f;
  f.gate_up.resize(static_cast<size_t>(E * d * 2 * F));
  f.gate_up_b.resize(static_cast<size_t>(E * 2 * F));
  f.down.resize(static_cast<size_t>(E * F * d));
  f.down_b = ref.Layer(l, n.expert_down_bias);
  const Vec gb = ref.Layer(l, n.expert_gate_bias), ub = ref.Layer(l, n.expert_up_bias);
  for (int64_t e = 0; e < E; ++e) {
    const Vec g = ref.Get(n.Expert(l, static_cast<int>(e), ExpertMatrix::kGate));  // [F, d]
    const Vec u = ref.Get(n.Expert(l, static_cast<int>(e), ExpertMatrix::kUp));
    const Vec dn = ref.Get(n.Expert(l, static_cast<int>(e), ExpertMatrix::kDown));  // [d, F]
    for (int64_t i = 0; i < F; ++i) {
      f.gate_up_b[static_cast<size_t>(e * 2 * F + 2 * i)] = gb[static_cast<size_t>(e * F + i)];
      f.gate_up_b[static_cast<size_t>(e * 2 * F + 2 * i + 1)] = ub[static_cast<size_t>(e * F + i)];
      for (int64_t j = 0; j < d; ++j) {
        f.gate_up[static_cast<size_t>((e * d + j) * 2 * F + 2 * i)] = g[static_cast<size_t>(i * d + j)];
        f.gate_up[static_cast<size_t>((e * d + j) * 2 * F + 2 * i + 1)] = u[static_cast<size_t>(i * d + j)];
        f.down[static_cast<size_t>((e * F + i) * d + j)] = dn[static_cast<size_t>(j * F + i)];
      }
    }
  }
  return f;
}

// gpt-oss's MoE block for every token, written from HF's GptOssTopKRouter and
// GptOssExperts on the fused tensors (x @ gate_up_proj[e] + bias, gate = even columns,
// up = odd; h @ down_proj[e] + bias): router logits with bias, the top-k logits (ties to
// the lower index) softmaxed among themselves, the clamped activation.
void ReferenceGptOssMoe(const Ref& ref, int l, const Vec& ffn_norm, const Vec& router,
                        std::vector<Vec>& h) {
  const ModelConfig& c = ref.c;
  const int64_t d = c.hidden_size, E = c.num_experts, F = c.moe_intermediate_size;
  const Vec router_b = ref.Layer(l, ref.names.router_linear_bias);
  const FusedExperts fused = GptOssFused(ref, l);
  const Vec& gate_up = fused.gate_up;
  const Vec& gate_up_b = fused.gate_up_b;
  const Vec& down = fused.down;
  const Vec& down_b = fused.down_b;
  const double limit = c.swiglu_limit, alpha = 1.702;
  for (Vec& ht : h) {
    const Vec x = ref.Norm(ht, ffn_norm, {});
    Vec logits = Ref::MatVec(router, x, E);
    for (int64_t e = 0; e < E; ++e) logits[static_cast<size_t>(e)] += router_b[static_cast<size_t>(e)];
    std::vector<int> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
    });
    const int K = c.num_experts_per_tok;
    const double top = logits[static_cast<size_t>(order[0])];
    double sum = 0;
    for (int k = 0; k < K; ++k) sum += std::exp(logits[static_cast<size_t>(order[static_cast<size_t>(k)])] - top);
    Vec y(static_cast<size_t>(d), 0.0);
    for (int k = 0; k < K; ++k) {
      const int64_t e = order[static_cast<size_t>(k)];
      const double weight = std::exp(logits[static_cast<size_t>(e)] - top) / sum;
      Vec act(static_cast<size_t>(F));
      for (int64_t i = 0; i < F; ++i) {
        double g = gate_up_b[static_cast<size_t>(e * 2 * F + 2 * i)];
        double u = gate_up_b[static_cast<size_t>(e * 2 * F + 2 * i + 1)];
        for (int64_t j = 0; j < d; ++j) {
          g += x[static_cast<size_t>(j)] * gate_up[static_cast<size_t>((e * d + j) * 2 * F + 2 * i)];
          u += x[static_cast<size_t>(j)] * gate_up[static_cast<size_t>((e * d + j) * 2 * F + 2 * i + 1)];
        }
        g = std::min(g, limit);
        u = std::clamp(u, -limit, limit);
        act[static_cast<size_t>(i)] = (u + 1) * g / (1 + std::exp(-alpha * g));
      }
      for (int64_t j = 0; j < d; ++j) {
        double o = down_b[static_cast<size_t>(e * d + j)];
        for (int64_t i = 0; i < F; ++i)
          o += act[static_cast<size_t>(i)] * down[static_cast<size_t>((e * F + i) * d + j)];
        y[static_cast<size_t>(j)] += weight * o;
      }
    }
    for (int64_t j = 0; j < d; ++j) ht[static_cast<size_t>(j)] += y[static_cast<size_t>(j)];
  }
}

// Softmax of `s` over the entries not masked and not -inf, at `pick`; the mask drops j with
// (m - scores[j]) / max(|scores[j]|, m) > 2 eps, m = s[pick].
double MaskedSoftmaxAt(const std::vector<double>& s, const std::vector<double>& scores, int pick,
                       double eps) {
  const double m = s[static_cast<size_t>(pick)];
  double sum = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    if (std::isinf(s[j]) && s[j] < 0) continue;
    if ((m - scores[j]) / std::max(std::abs(scores[j]), m) > 2 * eps) continue;
    sum += std::exp(s[j] - m);
  }
  return 1.0 / sum;
}

}  // namespace

void ReferenceSparseMixer(const std::vector<double>& scores, double eps, int ids[2],
                          double weights[2]) {
  // First expert: the first maximum.
  int i1 = 0;
  for (size_t j = 1; j < scores.size(); ++j)
    if (scores[j] > scores[static_cast<size_t>(i1)]) i1 = static_cast<int>(j);
  weights[0] = MaskedSoftmaxAt(scores, scores, i1, eps);
  // Second expert: the first maximum once i1 is -inf; the mask still measures `scores`.
  std::vector<double> masked = scores;
  masked[static_cast<size_t>(i1)] = -INFINITY;
  int i2 = i1 == 0 ? 1 : 0;
  for (size_t j = 0; j < masked.size(); ++j)
    if (masked[j] > masked[static_cast<size_t>(i2)]) i2 = static_cast<int>(j);
  weights[1] = MaskedSoftmaxAt(masked, scores, i2, eps);
  ids[0] = i1;
  ids[1] = i2;
}

std::vector<double> ReferenceLogits(const ModelConfig& c, const WeightSource& w,
                                    const std::vector<int32_t>& tokens,
                                    const std::vector<int64_t>& passes) {
  Ref ref{c, w, TensorNamesFor(c)};
  const TensorNames& n = ref.names;
  const int64_t d = c.hidden_size, hd = c.head_dim, H = c.num_heads, KV = c.num_kv_heads;
  const int64_t T = static_cast<int64_t>(tokens.size());
  const bool layer_norm = c.norm == NormKind::kLayerNorm;
  // The length at the end of the pass that computes token t.
  std::vector<int64_t> pass_end(static_cast<size_t>(T), T);
  if (!passes.empty()) {
    int64_t begin = 0;
    for (int64_t size : passes) {
      Check(size > 0 && begin + size <= T, "reference: bad pass sizes");
      for (int64_t t = begin; t < begin + size; ++t) pass_end[static_cast<size_t>(t)] = begin + size;
      begin += size;
    }
    Check(begin == T, "reference: pass sizes do not cover the tokens");
  }
  const Vec embed = ref.Get(n.embed);
  std::vector<Vec> h(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    h[static_cast<size_t>(t)] = Vec(embed.begin() + tokens[static_cast<size_t>(t)] * d,
                                    embed.begin() + (tokens[static_cast<size_t>(t)] + 1) * d);

  for (int l = 0; l < c.num_layers; ++l) {
    Vec attn_norm_b, ffn_norm_b;
    if (layer_norm) {
      attn_norm_b = ref.Layer(l, n.attn_norm_bias);
      ffn_norm_b = ref.Layer(l, n.ffn_norm_bias);
    }
    if (c.IsLinearLayer(l)) {
      const Vec attn_norm = ref.NormWeight(TensorNames::Layer(l, n.attn_norm));
      std::vector<Vec> x(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t)
        x[static_cast<size_t>(t)] = ref.Norm(h[static_cast<size_t>(t)], attn_norm, attn_norm_b);
      const std::vector<Vec> o = ReferenceGatedDeltaNet(ref, l, x);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < d; ++i)
          h[static_cast<size_t>(t)][static_cast<size_t>(i)] +=
              o[static_cast<size_t>(t)][static_cast<size_t>(i)];
    } else if (c.mla) {
      const Vec attn_norm = ref.Layer(l, n.attn_norm);
      std::vector<Vec> x(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) x[static_cast<size_t>(t)] = ref.Norm(h[static_cast<size_t>(t)], attn_norm, attn_norm_b);
      const std::vector<Vec> o = ReferenceMla(ref, l, x);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < d; ++i) h[static_cast<size_t>(t)][static_cast<size_t>(i)] += o[static_cast<size_t>(t)][static_cast<size_t>(i)];
    } else {
      const Vec attn_norm = ref.NormWeight(TensorNames::Layer(l, n.attn_norm)),
                Wq = ref.Layer(l, n.q), Wk = ref.Layer(l, n.k), Wv = ref.Layer(l, n.v),
                Wo = ref.Layer(l, n.o);
      Vec qb, kb, vb, ob, qn, kn;
      if (c.attention_out_bias) ob = ref.Layer(l, n.o_bias);
      if (c.attention_bias) {
        qb = ref.Layer(l, n.q_bias);
        kb = ref.Layer(l, n.k_bias);
        vb = ref.Layer(l, n.v_bias);
      }
      if (c.qk_norm) {
        qn = ref.NormWeight(TensorNames::Layer(l, n.q_norm));
        kn = ref.NormWeight(TensorNames::Layer(l, n.k_norm));
      }
      std::vector<Vec> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)),
          v(static_cast<size_t>(T));
      std::vector<Vec> gates(static_cast<size_t>(T));  // Gated attention: sigmoid(gate) per value.
      for (int64_t t = 0; t < T; ++t) {
        const Vec x = ref.Norm(h[static_cast<size_t>(t)], attn_norm, attn_norm_b);
        Vec qt;
        if (c.attention_output_gate) {
          // HF Qwen3NextAttention: q_proj viewed as [heads, 2 head_dim], chunked into q, gate.
          const Vec qg = Ref::MatVec(Wq, x, 2 * H * hd);
          Vec gt;
          for (int64_t hh = 0; hh < H; ++hh) {
            qt.insert(qt.end(), qg.begin() + 2 * hh * hd, qg.begin() + (2 * hh + 1) * hd);
            for (int64_t i = 0; i < hd; ++i)
              gt.push_back(1.0 / (1.0 + std::exp(-qg[static_cast<size_t>((2 * hh + 1) * hd + i)])));
          }
          gates[static_cast<size_t>(t)] = gt;
        } else {
          qt = Ref::MatVec(Wq, x, H * hd);
        }
        Vec kt = Ref::MatVec(Wk, x, KV * hd), vt = Ref::MatVec(Wv, x, KV * hd);
        if (c.attention_bias) {
          for (size_t i = 0; i < qt.size(); ++i) qt[i] += qb[i];
          for (size_t i = 0; i < kt.size(); ++i) kt[i] += kb[i];
          for (size_t i = 0; i < vt.size(); ++i) vt[i] += vb[i];
        }
        if (c.qk_norm && !c.qk_norm_per_head) {
          qt = ref.RmsNorm(qt, qn, 0, H * hd);
          kt = ref.RmsNorm(kt, kn, 0, KV * hd);
        } else if (c.qk_norm) {
          Vec q2, k2;
          for (int64_t hh = 0; hh < H; ++hh) {
            Vec r = ref.RmsNorm(qt, qn, hh * hd, hd);
            q2.insert(q2.end(), r.begin(), r.end());
          }
          for (int64_t hh = 0; hh < KV; ++hh) {
            Vec r = ref.RmsNorm(kt, kn, hh * hd, hd);
            k2.insert(k2.end(), r.begin(), r.end());
          }
          qt = q2;
          kt = k2;
        }
        if (!c.IsNopeLayer(l)) {
          ref.Rope(qt, H, t, pass_end[static_cast<size_t>(t)]);
          ref.Rope(kt, KV, t, pass_end[static_cast<size_t>(t)]);
          if (c.qk_norm_unweighted) {  // Llama 4's L2Norm: x / sqrt(mean(x^2) + eps) per head.
            for (Vec* x : {&qt, &kt})
              for (size_t h0 = 0; h0 < x->size(); h0 += static_cast<size_t>(hd)) {
                double ss = 0;
                for (int64_t i = 0; i < hd; ++i) ss += (*x)[h0 + i] * (*x)[h0 + i];
                const double inv = 1.0 / std::sqrt(ss / hd + c.rms_norm_eps);
                for (int64_t i = 0; i < hd; ++i) (*x)[h0 + i] *= inv;
              }
          }
        } else if (c.attn_temperature_floor > 0) {  // Llama 4's NoPE layers.
          const double s = std::log(std::floor((t + 1.0) / c.attn_temperature_floor) + 1.0) *
                               c.attn_temperature_scale +
                           1.0;
          for (double& e : qt) e *= s;
        }
        q[static_cast<size_t>(t)] = qt;
        k[static_cast<size_t>(t)] = kt;
        v[static_cast<size_t>(t)] = vt;
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
      // gpt-oss: per-head sink logits in the softmax (HF: softmax over [scores, sink], sink
      // column dropped), and sliding layers masking keys j <= t - window.
      const Vec sinks = c.attention_sinks ? ref.Layer(l, n.sinks) : Vec{};
      const int64_t window = c.AttentionWindow(l);
      const int64_t chunk = c.AttentionChunk(l);  // Llama 4: keys in the query's chunk only.
      for (int64_t t = 0; t < T; ++t) {
        Vec out(static_cast<size_t>(H * hd), 0.0);
        for (int64_t hh = 0; hh < H; ++hh) {
          const int64_t kvh = hh / (H / KV);
          Vec s(static_cast<size_t>(t + 1), -INFINITY);
          double mx = sinks.empty() ? -1e300 : sinks[static_cast<size_t>(hh)];
          for (int64_t j = 0; j <= t; ++j) {
            if (window > 0 && j <= t - window) continue;
            if (chunk > 0 && j / chunk != t / chunk) continue;
            double dot = 0;
            for (int64_t i = 0; i < hd; ++i)
              dot += q[static_cast<size_t>(t)][static_cast<size_t>(hh * hd + i)] *
                     k[static_cast<size_t>(j)][static_cast<size_t>(kvh * hd + i)];
            s[static_cast<size_t>(j)] = dot * scale;
            mx = std::max(mx, s[static_cast<size_t>(j)]);
          }
          double sum = sinks.empty() ? 0.0 : std::exp(sinks[static_cast<size_t>(hh)] - mx);
          for (auto& e : s) sum += (e = std::exp(e - mx));
          for (int64_t j = 0; j <= t; ++j)
            for (int64_t i = 0; i < hd; ++i)
              out[static_cast<size_t>(hh * hd + i)] +=
                  s[static_cast<size_t>(j)] / sum *
                  v[static_cast<size_t>(j)][static_cast<size_t>(kvh * hd + i)];
        }
        if (c.attention_output_gate)
          for (size_t i = 0; i < out.size(); ++i) out[i] *= gates[static_cast<size_t>(t)][i];
        Vec o = Ref::MatVec(Wo, out, d);
        for (size_t i = 0; i < ob.size(); ++i) o[i] += ob[i];
        for (int64_t i = 0; i < d; ++i)
          h[static_cast<size_t>(t)][static_cast<size_t>(i)] += o[static_cast<size_t>(i)];
      }
    }  // Not MLA.

    const Vec ffn_norm = ref.NormWeight(TensorNames::Layer(l, n.ffn_norm));
    if (!c.IsMoeLayer(l)) {
      const Vec g = ref.Layer(l, n.dense_gate), u = ref.Layer(l, n.dense_up), dn = ref.Layer(l, n.dense_down);
      for (int64_t t = 0; t < T; ++t) {
        const Vec x = ref.Norm(h[static_cast<size_t>(t)], ffn_norm, ffn_norm_b);
        const Vec y = ref.SwiGlu(g, u, dn, x, c.intermediate_size);
        for (int64_t i = 0; i < d; ++i) h[static_cast<size_t>(t)][static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
      }
      continue;
    }
    const Vec router = ref.Layer(l, n.router);
    if (c.arch == Arch::kGptOss) {
      ReferenceGptOssMoe(ref, l, ffn_norm, router, h);
      continue;
    }
    const Vec router_bias = c.topk_method == TopKMethod::kNoauxTc && c.router == RouterKind::kGroupedTopK
                                ? ref.Layer(l, n.router_bias)
                                : Vec{};
    std::vector<Vec> eg(static_cast<size_t>(c.num_experts)), eu(eg.size()), ed(eg.size());
    for (int e = 0; e < c.num_experts; ++e) {
      eg[static_cast<size_t>(e)] = ref.Get(n.Expert(l, e, ExpertMatrix::kGate));
      eu[static_cast<size_t>(e)] = ref.Get(n.Expert(l, e, ExpertMatrix::kUp));
      ed[static_cast<size_t>(e)] = ref.Get(n.Expert(l, e, ExpertMatrix::kDown));
    }
    Vec sg, su, sd, sgate;
    if (c.shared_expert_intermediate_size > 0) {
      sg = ref.Layer(l, n.shared_gate);
      su = ref.Layer(l, n.shared_up);
      sd = ref.Layer(l, n.shared_down);
      if (c.shared_expert_gate) sgate = ref.Layer(l, n.shared_expert_gate);
    }
    for (int64_t t = 0; t < T; ++t) {
      const Vec x = ref.Norm(h[static_cast<size_t>(t)], ffn_norm, ffn_norm_b);
      Vec p = Ref::MatVec(router, x, c.num_experts);
      if (c.router == RouterKind::kSparseMixer) {
        int ids[2];
        double weights[2];
        ReferenceSparseMixer(p, c.router_jitter_noise, ids, weights);
        for (int kk = 0; kk < 2; ++kk) {
          const size_t e = static_cast<size_t>(ids[kk]);
          const Vec ye = ref.SwiGlu(eg[e], eu[e], ed[e], x, c.moe_intermediate_size);
          for (int64_t i = 0; i < d; ++i) h[static_cast<size_t>(t)][static_cast<size_t>(i)] += weights[kk] * ye[static_cast<size_t>(i)];
        }
        continue;
      }
      if (c.router == RouterKind::kGroupedTopK) {
        std::vector<int> ids;
        Vec weights;
        ReferenceGroupedTopK(c, p, router_bias, &ids, &weights);
        Vec y(static_cast<size_t>(d), 0.0);
        for (size_t kk = 0; kk < ids.size(); ++kk) {
          const size_t e = static_cast<size_t>(ids[kk]);
          if (c.expert_weight_on_input) {  // Llama 4: the weight scales the expert's input.
            Vec xw = x;
            for (double& v : xw) v *= weights[kk];
            const Vec ye = ref.SwiGlu(eg[e], eu[e], ed[e], xw, c.moe_intermediate_size);
            for (int64_t i = 0; i < d; ++i) y[static_cast<size_t>(i)] += ye[static_cast<size_t>(i)];
            continue;
          }
          const Vec ye = ref.SwiGlu(eg[e], eu[e], ed[e], x, c.moe_intermediate_size);
          for (int64_t i = 0; i < d; ++i) y[static_cast<size_t>(i)] += weights[kk] * ye[static_cast<size_t>(i)];
        }
        if (!sg.empty()) {
          const Vec ys = ref.SwiGlu(sg, su, sd, x, c.shared_expert_intermediate_size);
          for (int64_t i = 0; i < d; ++i) y[static_cast<size_t>(i)] += ys[static_cast<size_t>(i)];
        }
        for (int64_t i = 0; i < d; ++i) h[static_cast<size_t>(t)][static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
        continue;
      }
      const double mx = *std::max_element(p.begin(), p.end());
      double sum = 0;
      for (auto& e : p) sum += (e = std::exp(e - mx));
      for (auto& e : p) e /= sum;
      std::vector<int> order(static_cast<size_t>(c.num_experts));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
      double top_sum = 0;
      for (int kk = 0; kk < c.num_experts_per_tok; ++kk) top_sum += p[static_cast<size_t>(order[static_cast<size_t>(kk)])];
      Vec y(static_cast<size_t>(d), 0.0);
      for (int kk = 0; kk < c.num_experts_per_tok; ++kk) {
        const int e = order[static_cast<size_t>(kk)];
        double weight = p[static_cast<size_t>(e)];
        if (c.norm_topk_prob) weight /= top_sum;
        weight *= c.routed_scaling_factor;
        const Vec ye = ref.SwiGlu(eg[static_cast<size_t>(e)], eu[static_cast<size_t>(e)], ed[static_cast<size_t>(e)], x, c.moe_intermediate_size);
        for (int64_t i = 0; i < d; ++i) y[static_cast<size_t>(i)] += weight * ye[static_cast<size_t>(i)];
      }
      if (!sg.empty()) {
        Vec ys = ref.SwiGlu(sg, su, sd, x, c.shared_expert_intermediate_size);
        double s = 1.0;
        if (!sgate.empty()) s = 1.0 / (1.0 + std::exp(-Ref::MatVec(sgate, x, 1)[0]));
        for (int64_t i = 0; i < d; ++i) y[static_cast<size_t>(i)] += s * ys[static_cast<size_t>(i)];
      }
      for (int64_t i = 0; i < d; ++i) h[static_cast<size_t>(t)][static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
    }
  }
  const Vec final_norm = ref.NormWeight(n.final_norm);
  const Vec final_norm_b = layer_norm ? ref.Get(n.final_norm_bias) : Vec{};
  const TensorView* head_view = w.Find(n.lm_head);
  const Vec head = head_view != nullptr ? ToDouble(*head_view) : embed;
  const Vec head_b = c.lm_head_bias ? ref.Get(n.lm_head_bias) : Vec{};
  std::vector<double> logits;
  logits.reserve(static_cast<size_t>(T * c.vocab_size));
  for (int64_t t = 0; t < T; ++t) {
    const Vec x = ref.Norm(h[static_cast<size_t>(t)], final_norm, final_norm_b);
    Vec lt = Ref::MatVec(head, x, c.vocab_size);
    for (size_t i = 0; i < head_b.size(); ++i) lt[i] += head_b[i];
    logits.insert(logits.end(), lt.begin(), lt.end());
  }
  return logits;
}

LogitGap CompareLogits(const std::vector<float>& got, const std::vector<double>& ref) {
  LogitGap gap;
  for (size_t i = 0; i < ref.size(); ++i) {
    gap.scale = std::max(gap.scale, std::abs(ref[i]));
    const double g = i < got.size() ? got[i] : std::numeric_limits<double>::infinity();
    gap.max_err = std::max(gap.max_err, std::abs(ref[i] - g));
  }
  if (got.size() != ref.size()) gap.max_err = std::numeric_limits<double>::infinity();
  return gap;
}

}  // namespace moex::testing

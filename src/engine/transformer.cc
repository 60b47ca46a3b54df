#include "engine/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace moex {

namespace {

const float* BiasOrNull(const std::vector<float>& b) {
  return b.empty() ? nullptr : b.data();
}

// x / sqrt(mean(x^2) + eps) for each of n rows of `width` (Llama 4's weightless q/k norm).
void UnitRmsNorm(float* x, int64_t n, int64_t width, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    float* row = x + r * width;
    double ss = 0.0;
    for (int64_t i = 0; i < width; ++i) ss += static_cast<double>(row[i]) * row[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(width) + eps));
    for (int64_t i = 0; i < width; ++i) row[i] *= inv;
  }
}

// Llama 4's attention temperature for a query at `pos` on a NoPE layer.
float AttentionTemperature(const ModelConfig& c, int64_t pos) {
  const double steps = std::floor(static_cast<double>(pos + 1) / c.attn_temperature_floor);
  return static_cast<float>(std::log(steps + 1.0) * c.attn_temperature_scale + 1.0);
}

}  // namespace

Transformer::Transformer(const Model& model, MoeExecutor& executor)
    : model_(model), executor_(executor), rope_(model.config), stack_(executor.event_sink()) {
  if (stack_ != nullptr) events_.Add(stack_);
}

void Transformer::AddSink(policy::EventSink* sink) {
  if (stack_ != nullptr) events_.Remove(stack_);
  events_.Add(sink);
  if (stack_ != nullptr) events_.Add(stack_);
}

std::vector<float> Transformer::Forward(std::span<const BatchItem> items) {
  const ModelConfig& c = model_.config;
  const int64_t d = c.hidden_size;
  int64_t total = 0;
  for (const BatchItem& item : items) {
    Check(item.cache != nullptr && !item.tokens.empty(), "batch item without tokens or cache");
    Check(!item.cache->state_lost(),
          "a failed forward pass left this sequence's recurrent state partly updated; start "
          "the sequence again");
    Check(item.cache->length() + static_cast<int64_t>(item.tokens.size()) <= item.cache->capacity(),
          "sequence of ", item.cache->length() + static_cast<int64_t>(item.tokens.size()),
          " tokens exceeds its context capacity of ", item.cache->capacity());
    // Sliding-window attention is implemented per layer (layer_sliding, gpt-oss); a window
    // over every layer (phimoe) changes nothing up to its length, and longer is refused.
    Check(c.sliding_window <= 0 || !c.layer_sliding.empty() ||
              item.cache->length() + static_cast<int64_t>(item.tokens.size()) <= c.sliding_window,
          "sequence of ", item.cache->length() + static_cast<int64_t>(item.tokens.size()),
          " tokens exceeds the model's sliding_window of ", c.sliding_window,
          " tokens, and moex does not implement sliding-window attention");
    total += static_cast<int64_t>(item.tokens.size());
  }
  const size_t T = static_cast<size_t>(total);
  Grow(hidden_, T * d);
  Grow(normed_, T * d);

  // Embeddings, and each token's position and rotation.
  const int64_t half = rope_.half();
  Grow(cos_, T * half);
  Grow(sin_, T * half);
  positions_.resize(T);
  int64_t row = 0;
  for (const BatchItem& item : items) {
    const int64_t rope_length =
        std::max(item.cache->length() + static_cast<int64_t>(item.tokens.size()), item.rope_length);
    for (size_t i = 0; i < item.tokens.size(); ++i, ++row) {
      const int32_t id = item.tokens[i];
      Check(id >= 0 && id < c.vocab_size, "token id ", id, " is outside the vocabulary (0..",
            c.vocab_size - 1, ")");
      kernels::ToF32(model_.embed->row(id), model_.embed->dtype, d, &hidden_[row * d]);
      const size_t t = static_cast<size_t>(row);
      positions_[t] = item.cache->length() + static_cast<int64_t>(i);
      rope_.Angles(positions_[t], rope_length, &cos_[t * half], &sin_[t * half]);
    }
  }

  EmitIterationBegin(items, total);
  try {
    for (int layer = 0; layer < c.num_layers; ++layer) {
      if (c.IsLinearLayer(layer)) {
        GatedDeltaNet(layer, items, total);
      } else {
        Attention(layer, items, total);
      }
      FeedForward(layer, total);
    }
  } catch (...) {
    // The caches were not advanced, so the sequences' rows stay as they were before this
    // pass; a recurrent state updated in place cannot be, so such a sequence is refused.
    for (const BatchItem& item : items) item.cache->MarkStateLost();
    events_.OnIterationEnd();
    throw;
  }
  events_.OnIterationEnd();
  for (const BatchItem& item : items) item.cache->Advance(static_cast<int64_t>(item.tokens.size()));

  // Final norm and LM head, only for the rows whose logits are wanted.
  std::vector<int64_t> rows;
  row = 0;
  for (const BatchItem& item : items) {
    const int64_t n = static_cast<int64_t>(item.tokens.size());
    if (item.all_logits) {
      for (int64_t i = 0; i < n; ++i) rows.push_back(row + i);
    } else {
      rows.push_back(row + n - 1);
    }
    row += n;
  }
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(&normed_[i * d], &hidden_[static_cast<size_t>(rows[i]) * d], sizeof(float) * d);
  Norm(normed_.data(), model_.final_norm, model_.final_norm_bias, static_cast<int64_t>(rows.size()),
       normed_.data());
  std::vector<float> logits(rows.size() * static_cast<size_t>(c.vocab_size));
  kernels::Linear(*model_.lm_head, normed_.data(), static_cast<int64_t>(rows.size()), logits.data(),
                  BiasOrNull(model_.lm_head_bias), model_.lm_head_scale);
  return logits;
}

void Transformer::Norm(const float* x, const std::vector<float>& weight,
                       const std::vector<float>& bias, int64_t n, float* out) const {
  const ModelConfig& c = model_.config;
  if (c.norm == NormKind::kLayerNorm) {
    kernels::LayerNorm(x, weight.data(), bias.data(), n, c.hidden_size, c.rms_norm_eps, out);
  } else {
    kernels::RmsNorm(x, weight.data(), n, c.hidden_size, c.rms_norm_eps, out);
  }
}

int64_t Transformer::BeginRequest(std::span<const int32_t> prompt) {
  policy::RequestBeginEvent e;
  e.request = next_request_++;
  e.prompt = prompt.data();
  e.prompt_len = static_cast<int64_t>(prompt.size());
  events_.OnRequestBegin(e);
  return e.request;
}

void Transformer::EndRequest(int64_t request) {
  const policy::RequestEndEvent e{request};
  events_.OnRequestEnd(e);
}

// iteration_begin carries each request's tokens of this pass and their mean input embedding
// (hidden_ holds the embeddings when this is called).
void Transformer::EmitIterationBegin(std::span<const BatchItem> items, int64_t total) {
  const int64_t d = model_.config.hidden_size;
  iteration_requests_.clear();
  iteration_token_counts_.clear();
  iteration_tokens_.clear();
  decode_tokens_.clear();
  pooled_.assign(items.size() * static_cast<size_t>(d), 0.0f);
  int64_t row = 0;
  for (size_t b = 0; b < items.size(); ++b) {
    const BatchItem& item = items[b];
    iteration_requests_.push_back(item.request);
    iteration_token_counts_.push_back(static_cast<int64_t>(item.tokens.size()));
    iteration_tokens_.insert(iteration_tokens_.end(), item.tokens.begin(), item.tokens.end());
    decode_tokens_.insert(decode_tokens_.end(), item.tokens.size(), item.tokens.size() == 1);
    float* pooled = &pooled_[b * static_cast<size_t>(d)];
    const int64_t n = static_cast<int64_t>(item.tokens.size());
    for (int64_t i = 0; i < n; ++i, ++row)
      for (int64_t j = 0; j < d; ++j) pooled[j] += hidden_[static_cast<size_t>(row * d + j)];
    for (int64_t j = 0; j < d; ++j) pooled[j] /= static_cast<float>(n);
  }
  policy::IterationBeginEvent e;
  e.iteration = next_iteration_++;
  e.n_requests = static_cast<int64_t>(items.size());
  e.requests = iteration_requests_.data();
  e.token_counts = iteration_token_counts_.data();
  e.tokens = iteration_tokens_.data();
  e.n_tokens = total;
  int64_t pooled_d = d;
  if (routing_source_ != nullptr)
    routing_source_->OverridePooled(iteration_token_counts_, &pooled_, &pooled_d);
  e.pooled = pooled_.data();
  e.d = pooled_d;
  events_.OnIterationBegin(e);
}

void Transformer::Attention(int layer, std::span<const BatchItem> items, int64_t total) {
  const ModelConfig& c = model_.config;
  if (c.mla) return MlaAttention(layer, items, total);
  const LayerWeights& L = model_.layers[static_cast<size_t>(layer)];
  const int64_t d = c.hidden_size;
  const int64_t hd = c.head_dim;
  const int64_t q_dim = c.num_heads * hd;
  const int64_t kv_dim = c.num_kv_heads * hd;
  const size_t T = static_cast<size_t>(total);
  Grow(q_, T * q_dim);
  Grow(k_, T * kv_dim);
  Grow(v_, T * kv_dim);
  Grow(attn_, T * q_dim);
  Grow(proj_, T * d);

  Norm(hidden_.data(), L.attn_norm, L.attn_norm_bias, total, normed_.data());
  // Gated attention: q_proj's rows hold each head's query then its gate.
  const bool gated = c.attention_output_gate;
  if (gated) {
    Grow(q_gate_, T * 2 * q_dim);
    Grow(out_gate_, T * q_dim);
  }
  // q, k and v in one parallel region: one fork/join per layer instead of three.
  const kernels::LinearOutput qkv[] = {
      kernels::OutputOf(*L.q, gated ? q_gate_.data() : q_.data(), BiasOrNull(L.q_bias), L.q_scale),
      kernels::OutputOf(*L.k, k_.data(), BiasOrNull(L.k_bias), L.k_scale),
      kernels::OutputOf(*L.v, v_.data(), BiasOrNull(L.v_bias), L.v_scale)};
  kernels::LinearMulti(qkv, normed_.data(), total);
  if (gated) {
    for (size_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < c.num_heads; ++h) {
        const float* src = &q_gate_[(t * c.num_heads + static_cast<size_t>(h)) * 2 * hd];
        std::memcpy(&q_[t * q_dim + h * hd], src, sizeof(float) * hd);
        std::memcpy(&out_gate_[t * q_dim + h * hd], src + hd, sizeof(float) * hd);
      }
  }
  if (c.qk_norm) {
    if (c.qk_norm_per_head) {  // Qwen3: each head normalised on its own.
      kernels::RmsNorm(q_.data(), L.q_norm.data(), total * c.num_heads, hd, c.rms_norm_eps,
                       q_.data());
      kernels::RmsNorm(k_.data(), L.k_norm.data(), total * c.num_kv_heads, hd, c.rms_norm_eps,
                       k_.data());
    } else {  // OLMoE: the whole projection normalised before the split into heads.
      kernels::RmsNorm(q_.data(), L.q_norm.data(), total, q_dim, c.rms_norm_eps, q_.data());
      kernels::RmsNorm(k_.data(), L.k_norm.data(), total, kv_dim, c.rms_norm_eps, k_.data());
    }
  }
  const int64_t half = rope_.half();
  const bool nope = c.IsNopeLayer(layer);
  if (nope) {
    // Llama 4's NoPE layers: no rotation; temperature tuning scales the queries.
    if (c.attn_temperature_floor > 0) {
      for (size_t t = 0; t < T; ++t) {
        const float s = AttentionTemperature(c, positions_[t]);
        for (int64_t i = 0; i < q_dim; ++i) q_[t * q_dim + i] *= s;
      }
    }
  } else if (c.RotaryDim() == hd) {
    for (size_t t = 0; t < T; ++t) {
      kernels::RopeNeox(&q_[t * q_dim], c.num_heads, hd, &cos_[t * half], &sin_[t * half]);
      kernels::RopeNeox(&k_[t * kv_dim], c.num_kv_heads, hd, &cos_[t * half], &sin_[t * half]);
    }
  } else {  // Partial rotary (GLM-4.5): rotate-half within each head's first 2 * half values.
    const int64_t rot = 2 * half;
    for (size_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < c.num_heads; ++h)
        kernels::RopeNeox(&q_[t * q_dim + h * hd], 1, rot, &cos_[t * half], &sin_[t * half]);
      for (int64_t h = 0; h < c.num_kv_heads; ++h)
        kernels::RopeNeox(&k_[t * kv_dim + h * hd], 1, rot, &cos_[t * half], &sin_[t * half]);
    }
  }

  if (c.qk_norm_unweighted && !nope) {  // Llama 4: each rotated head RMS-normalised, no weight.
    UnitRmsNorm(q_.data(), total * c.num_heads, hd, c.rms_norm_eps);
    UnitRmsNorm(k_.data(), total * c.num_kv_heads, hd, c.rms_norm_eps);
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  int64_t row = 0;
  for (const BatchItem& item : items) {
    KvCache& cache = *item.cache;
    const int64_t n = static_cast<int64_t>(item.tokens.size());
    const int64_t pos0 = cache.length();
    std::memcpy(cache.keys(layer) + pos0 * kv_dim, &k_[static_cast<size_t>(row * kv_dim)],
                sizeof(float) * n * kv_dim);
    std::memcpy(cache.values(layer) + pos0 * kv_dim, &v_[static_cast<size_t>(row * kv_dim)],
                sizeof(float) * n * kv_dim);
    kernels::AttentionExtras extras;
    extras.sinks = L.sinks.empty() ? nullptr : L.sinks.data();
    extras.window = c.AttentionWindow(layer);
    extras.chunk = c.AttentionChunk(layer);
    kernels::Attention(&q_[static_cast<size_t>(row * q_dim)], n, pos0, cache.keys(layer),
                       cache.values(layer), c.num_heads, c.num_kv_heads, hd, scale,
                       &attn_[static_cast<size_t>(row * q_dim)], extras);
    row += n;
  }
  if (gated)
    for (size_t i = 0; i < T * q_dim; ++i) attn_[i] *= 1.0f / (1.0f + std::exp(-out_gate_[i]));
  kernels::Linear(*L.o, attn_.data(), total, proj_.data(), BiasOrNull(L.o_bias), L.o_scale);
  for (size_t i = 0; i < T * d; ++i) hidden_[i] += proj_[i];
}

void Transformer::DenseSwiGlu(const DenseFfn& ffn, const float* x, int64_t n, float* out) {
  const size_t f = static_cast<size_t>(ffn.neurons);
  Grow(gate_, static_cast<size_t>(n) * f);
  Grow(up_, static_cast<size_t>(n) * f);
  const kernels::LinearOutput gate_up[] = {
      kernels::OutputOf(*ffn.gate, gate_.data(), nullptr, ffn.gate_scale),
      kernels::OutputOf(*ffn.up, up_.data(), nullptr, ffn.up_scale)};
  kernels::LinearMulti(gate_up, x, n);
  kernels::SiluMul(gate_.data(), up_.data(), n * ffn.neurons);
  kernels::Linear(*ffn.down, gate_.data(), n, out, nullptr, ffn.down_scale);
}

void Transformer::FeedForward(int layer, int64_t total) {
  const ModelConfig& c = model_.config;
  const LayerWeights& L = model_.layers[static_cast<size_t>(layer)];
  const int64_t d = c.hidden_size;
  const size_t T = static_cast<size_t>(total);
  Grow(ffn_out_, T * d);
  Grow(proj_, T * d);
  Norm(hidden_.data(), L.ffn_norm, L.ffn_norm_bias, total, normed_.data());

  if (!L.is_moe) {
    DenseSwiGlu(*L.dense_ffn, normed_.data(), total, ffn_out_.data());
    for (size_t i = 0; i < T * d; ++i) hidden_[i] += ffn_out_[i];
    return;
  }

  Grow(router_logits_, T * c.num_experts);
  kernels::Linear(*L.router, normed_.data(), total, router_logits_.data(),
                  BiasOrNull(L.router_logit_bias));
  Route(router_logits_.data(), total, c, &routing_,
        L.router_bias.empty() ? nullptr : L.router_bias.data());
  if (routing_source_ != nullptr) routing_source_->Override(layer, decode_tokens_, &routing_);
  // The one gate event: the offload stack plans the layer's demand from it, which Run computes.
  // Built only when someone listens (a resident run without observers skips the routed set).
  if (!events_.empty()) events_.OnGate(GateEventOf(layer, routing_, normed_.data(), d, &routed_));

  std::fill(ffn_out_.begin(), ffn_out_.begin() + static_cast<ptrdiff_t>(T * d), 0.0f);
  executor_.Run(layer, routing_, normed_.data(), ffn_out_.data());

  if (L.shared_expert) {
    DenseSwiGlu(*L.shared_expert, normed_.data(), total, proj_.data());
    if (L.shared_expert_gate != nullptr) {  // Qwen2-MoE: sigmoid(w . x) scales the shared expert.
      std::vector<float> g(T);
      kernels::Linear(*L.shared_expert_gate, normed_.data(), total, g.data());
      for (size_t t = 0; t < T; ++t) {
        const float s = 1.0f / (1.0f + std::exp(-g[t]));
        for (int64_t j = 0; j < d; ++j) proj_[t * d + j] *= s;
      }
    }
    for (size_t i = 0; i < T * d; ++i) ffn_out_[i] += proj_[i];
  }
  for (size_t i = 0; i < T * d; ++i) hidden_[i] += ffn_out_[i];
}

}  // namespace moex

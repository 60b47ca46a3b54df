#include "model/mla_weights.h"

#include "core/error.h"

namespace moex {

void LoadMlaWeights(const WeightSource& w, const TensorNames& n, const ModelConfig& c, int layer,
                    LayerWeights& L) {
  const Mla& m = *c.mla;
  const int64_t d = c.hidden_size, H = c.num_heads;
  const int64_t nope = m.qk_nope_head_dim, v_dim = m.v_head_dim, lat = m.kv_lora_rank;
  auto name = [&](const std::string& s) { return TensorNames::Layer(layer, s); };
  if (m.q_lora_rank > 0) {
    L.q_a = &w.Get(name(n.q_a), {m.q_lora_rank, d});
    L.q_a_norm = TensorToF32(w.Get(name(n.q_a_norm), {m.q_lora_rank}));
    L.q_b = &w.Get(name(n.q_b), {H * m.qk_head_dim(), m.q_lora_rank});
  } else {
    L.q = &w.Get(name(n.q), {H * m.qk_head_dim(), d});
  }
  L.kv_a = &w.Get(name(n.kv_a), {m.cache_row(), d});
  L.kv_a_norm = TensorToF32(w.Get(name(n.kv_a_norm), {lat}));
  L.o = &w.Get(name(n.o), {d, H * v_dim});
  const std::vector<float> kv_b = TensorToF32(w.Get(name(n.kv_b), {H * (nope + v_dim), lat}));
  // Row h * (nope + v_dim) + j of kv_b is k_nope's j-th output of head h (j < nope), then
  // v's (j - nope)-th.
  L.mla_k_up.resize(static_cast<size_t>(H * nope * lat));
  L.mla_v_up_t.resize(static_cast<size_t>(H * lat * v_dim));
  for (int64_t h = 0; h < H; ++h) {
    const float* head = &kv_b[static_cast<size_t>(h * (nope + v_dim) * lat)];
    std::copy(head, head + nope * lat, &L.mla_k_up[static_cast<size_t>(h * nope * lat)]);
    for (int64_t i = 0; i < v_dim; ++i)
      for (int64_t l = 0; l < lat; ++l)
        L.mla_v_up_t[static_cast<size_t>((h * lat + l) * v_dim + i)] =
            head[static_cast<size_t>((nope + i) * lat + l)];
  }
}

}  // namespace moex

#include "model/mla_weights.h"

#include <cstring>

#include "core/error.h"

namespace moex {

namespace {

// Whether rows of `cols` values of `dtype` are whole blocks (so each row starts on a block).
bool RowsAddressable(DType dtype, int64_t cols) {
  return cols % DTypeBlockElems(dtype) == 0;
}

// H heads of [rows, cols] in the file's tensor as they are.
MlaHeads InFile(const TensorView& t, int64_t rows, int64_t cols) {
  MlaHeads m;
  m.dtype = t.dtype;
  m.rows = rows;
  m.cols = cols;
  m.head_bytes = DTypeBytes(t.dtype, rows * cols);
  m.data = t.data;
  return m;
}

// H heads of [rows, cols] built element by element: value(h, r, c) is the element's index in
// `src`, copied in src's dtype when that is an element format (f32, f16, bf16: exact moves),
// else widened to f32 (the dequantised values, exact too).
template <class SourceIndex>
MlaHeads Built(const TensorView& src, int64_t heads, int64_t rows, int64_t cols,
               SourceIndex index) {
  MlaHeads m;
  m.rows = rows;
  m.cols = cols;
  const size_t count = static_cast<size_t>(heads * rows * cols);
  if (!IsBlockQuantized(src.dtype)) {
    const size_t elem = DTypeBytes(src.dtype, 1);
    m.dtype = src.dtype;
    m.owned.resize(count * elem);
    size_t i = 0;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c, ++i)
          std::memcpy(&m.owned[i * elem], src.data + index(h, r, c) * elem, elem);
  } else {
    const std::vector<float> values = TensorToF32(src);
    m.dtype = DType::kF32;
    m.owned.resize(count * sizeof(float));
    auto* out = reinterpret_cast<float*>(m.owned.data());
    size_t i = 0;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c, ++i) out[i] = values[index(h, r, c)];
  }
  m.head_bytes = DTypeBytes(m.dtype, rows * cols);
  return m;
}

}  // namespace

void LoadMlaWeights(const WeightSource& w, const TensorNames& n, const ModelConfig& c, int layer,
                    LayerWeights& L) {
  const Mla& m = *c.mla;
  const int64_t d = c.hidden_size, H = c.num_heads;
  const int64_t nope = m.qk_nope_head_dim, v_dim = m.v_head_dim, lat = m.kv_lora_rank;
  const int64_t per = nope + v_dim;
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

  // llama.cpp's split form is already what the absorbed attention multiplies: k_b [H, L, nope]
  // and v_b [H, v, L]. Used as stored when the rows are whole blocks.
  const TensorView* k_b = w.Find(name(n.k_b));
  const TensorView* v_b = w.Find(name(n.v_b));
  if (k_b != nullptr || v_b != nullptr) {
    Check(k_b != nullptr && v_b != nullptr, w.Describe(), ": layer ", layer,
          " has only one of attn_k_b and attn_v_b");
    const TensorView& kb = w.Get(name(n.k_b), {H, lat, nope});
    const TensorView& vb = w.Get(name(n.v_b), {H, v_dim, lat});
    L.mla_k_up = RowsAddressable(kb.dtype, nope)
                     ? InFile(kb, lat, nope)
                     : Built(kb, H, lat, nope, [&](int64_t h, int64_t r, int64_t col) {
                         return static_cast<size_t>((h * lat + r) * nope + col);
                       });
    L.mla_v_up = RowsAddressable(vb.dtype, lat)
                     ? InFile(vb, v_dim, lat)
                     : Built(vb, H, v_dim, lat, [&](int64_t h, int64_t r, int64_t col) {
                         return static_cast<size_t>((h * v_dim + r) * lat + col);
                       });
    return;
  }

  // HF's kv_b_proj [H * (nope + v), L]: row h * (nope + v) + j is k_nope's j-th output of
  // head h (j < nope), then v's (j - nope)-th. v's rows are a head's [v, L] matrix in place;
  // k's are transposed into a copy.
  const TensorView& kv_b = w.Get(name(n.kv_b), {H * per, lat});
  L.mla_k_up = Built(kv_b, H, lat, nope, [&](int64_t h, int64_t r, int64_t col) {
    return static_cast<size_t>((h * per + col) * lat + r);
  });
  if (RowsAddressable(kv_b.dtype, lat)) {
    const size_t row_bytes = DTypeBytes(kv_b.dtype, lat);
    L.mla_v_up.dtype = kv_b.dtype;
    L.mla_v_up.rows = v_dim;
    L.mla_v_up.cols = lat;
    L.mla_v_up.head_bytes = static_cast<size_t>(per) * row_bytes;
    L.mla_v_up.data = kv_b.data + static_cast<size_t>(nope) * row_bytes;
  } else {
    L.mla_v_up = Built(kv_b, H, v_dim, lat, [&](int64_t h, int64_t r, int64_t col) {
      return static_cast<size_t>((h * per + nope + r) * lat + col);
    });
  }
}

}  // namespace moex

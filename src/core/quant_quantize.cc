// A simple quantiser for every block format moex reads: per (sub-)block scales from the
// extreme values, round-to-nearest codes against the stored (f16-rounded) scales. It writes
// valid blocks for test models (`moex random-model --gguf-type`); it does not search for the
// error-minimising scales llama-quantize finds. The bit packing is the exact inverse of
// quant_dequantize.cc (layouts in docs/formats/quantized.md).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant_format.h"

namespace moex {
namespace {

// Stores `value` as f16 at `p` and returns the stored value (what the decoder will use).
float PutHalf(uint8_t* p, float value, QuantFormat format) {
  const uint16_t h = F32ToF16(value);
  Check(((h >> 10) & 0x1f) != 0x1f, QuantFormatName(format), ": a block scale of ", value,
        " does not fit in f16 (weights too large for this format)");
  p[0] = static_cast<uint8_t>(h & 0xff);
  p[1] = static_cast<uint8_t>(h >> 8);
  return F16ToF32(h);
}

int Code(float x, float inverse_scale, float offset, int lo, int hi) {
  const long v = std::lround(x * inverse_scale + offset);
  return static_cast<int>(std::clamp<long>(v, lo, hi));
}

float Inverse(float d) {
  return d != 0 ? 1.0f / d : 0.0f;
}

// The weight of largest magnitude, with its sign.
float SignedMax(const float* x, int n) {
  float best = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  }
  return best;
}

void MinMax(const float* x, int n, float* mn, float* mx) {
  *mn = *std::min_element(x, x + n);
  *mx = *std::max_element(x, x + n);
}

// --- 32-weight formats ------------------------------------------------------------------

void Q4_0(const float* x, uint8_t* b) {
  const float d = PutHalf(b, SignedMax(x, 32) / -8, QuantFormat::kQ4_0);
  const float id = Inverse(d);
  for (int j = 0; j < 16; ++j) {
    b[2 + j] =
        static_cast<uint8_t>(Code(x[j], id, 8, 0, 15) | (Code(x[j + 16], id, 8, 0, 15) << 4));
  }
}

void Q4_1(const float* x, uint8_t* b) {
  float mn, mx;
  MinMax(x, 32, &mn, &mx);
  const float d = PutHalf(b, (mx - mn) / 15, QuantFormat::kQ4_1);
  const float m = PutHalf(b + 2, mn, QuantFormat::kQ4_1);
  const float id = Inverse(d);
  for (int j = 0; j < 16; ++j) {
    b[4 + j] = static_cast<uint8_t>(Code(x[j] - m, id, 0, 0, 15) |
                                    (Code(x[j + 16] - m, id, 0, 0, 15) << 4));
  }
}

void PutQ5(const int* q, uint8_t* qh, uint8_t* qs) {
  uint32_t high = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xf) | ((q[j + 16] & 0xf) << 4));
    high |= static_cast<uint32_t>(q[j] >> 4) << j;
    high |= static_cast<uint32_t>(q[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(qh, &high, 4);
}

void Q5_0(const float* x, uint8_t* b) {
  const float d = PutHalf(b, SignedMax(x, 32) / -16, QuantFormat::kQ5_0);
  const float id = Inverse(d);
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = Code(x[j], id, 16, 0, 31);
  PutQ5(q, b + 2, b + 6);
}

void Q5_1(const float* x, uint8_t* b) {
  float mn, mx;
  MinMax(x, 32, &mn, &mx);
  const float d = PutHalf(b, (mx - mn) / 31, QuantFormat::kQ5_1);
  const float m = PutHalf(b + 2, mn, QuantFormat::kQ5_1);
  const float id = Inverse(d);
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = Code(x[j] - m, id, 0, 0, 31);
  PutQ5(q, b + 4, b + 8);
}

// GGML's reference rounding: codes from the f32 scale, not its f16 rounding (what llama.cpp's
// `--outtype q8_0` writes, so moex's GGUF files match it bit for bit).
void Q8_0(const float* x, uint8_t* b) {
  const float d = std::fabs(SignedMax(x, 32)) / 127;
  PutHalf(b, d, QuantFormat::kQ8_0);
  const float id = Inverse(d);
  for (int j = 0; j < 32; ++j) {
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(Code(x[j], id, 0, -127, 127)));
  }
}

constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

int NearestIq4(float x, float d) {
  int best = 0;
  float best_err = INFINITY;
  for (int i = 0; i < 16; ++i) {
    const float err = std::fabs(x - d * static_cast<float>(kIq4Levels[i]));
    if (err < best_err) best_err = err, best = i;
  }
  return best;
}

void IQ4_NL(const float* x, uint8_t* b) {
  const float d = PutHalf(b, SignedMax(x, 32) / -127, QuantFormat::kIQ4_NL);
  for (int j = 0; j < 16; ++j) {
    b[2 + j] = static_cast<uint8_t>(NearestIq4(x[j], d) | (NearestIq4(x[j + 16], d) << 4));
  }
}

// E2M1 magnitudes (OCP MX FP4), codes 0-7; code | 8 is the negative.
constexpr float kE2M1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

void MXFP4(const float* x, uint8_t* b) {
  const float amax = std::fabs(SignedMax(x, 32));
  int e = 0;  // Any exponent encodes an all-zero block.
  if (amax > 0) e = std::clamp(static_cast<int>(std::ceil(std::log2(amax / 6))) + 127, 0, 254);
  b[0] = static_cast<uint8_t>(e);
  const float scale = std::ldexp(1.0f, e - 127);
  auto code = [&](float v) {
    const float a = std::fabs(v) / scale;
    int best = 0;
    for (int i = 1; i < 8; ++i) {
      if (std::fabs(a - kE2M1[i]) < std::fabs(a - kE2M1[best])) best = i;
    }
    return best == 0 ? 0 : (best | (v < 0 ? 8 : 0));
  };
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + 16]) << 4));
}

// --- k-quants (256 weights) -------------------------------------------------------------

// Sub-block scales s[i] and mins m[i] (m = -min, at least 0) for `levels` + 1 codes.
void AsymmetricScales(const float* x, int sub, int n_sub, int levels, float* s, float* m) {
  for (int i = 0; i < n_sub; ++i) {
    float mn, mx;
    MinMax(x + i * sub, sub, &mn, &mx);
    mn = std::min(mn, 0.0f);
    s[i] = (mx - mn) / static_cast<float>(levels);
    m[i] = -mn;
  }
}

void Q2_K(const float* x, uint8_t* b) {
  float s[16], m[16];
  AsymmetricScales(x, 16, 16, 3, s, m);
  const float d = PutHalf(b + 80, *std::max_element(s, s + 16) / 15, QuantFormat::kQ2_K);
  const float dmin = PutHalf(b + 82, *std::max_element(m, m + 16) / 15, QuantFormat::kQ2_K);
  std::memset(b + 16, 0, 64);
  for (int i = 0; i < 16; ++i) {
    const int sc = Code(s[i], Inverse(d), 0, 0, 15), mc = Code(m[i], Inverse(dmin), 0, 0, 15);
    b[i] = static_cast<uint8_t>(sc | (mc << 4));
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mc);
    // Sub-block i: half i / 8, plane (i % 8) / 2, part i % 2 (decoder order).
    const int half = i / 8, shift = 2 * ((i % 8) / 2), part = i % 2;
    for (int l = 0; l < 16; ++l) {
      const int q = Code(x[16 * i + l] + ml, Inverse(dl), 0, 0, 3);
      b[16 + 32 * half + 16 * part + l] |= static_cast<uint8_t>(q << shift);
    }
  }
}

// Signed sub-block scales s[i] chosen so the sub-block's largest weight gets code `low`.
void SymmetricScales(const float* x, int sub, int n_sub, int low, float* s) {
  for (int i = 0; i < n_sub; ++i) s[i] = SignedMax(x + i * sub, sub) / static_cast<float>(low);
}

float MaxAbs(const float* v, int n) {
  float a = 0;
  for (int i = 0; i < n; ++i) a = std::max(a, std::fabs(v[i]));
  return a;
}

void Q3_K(const float* x, uint8_t* b) {
  float s[16];
  SymmetricScales(x, 16, 16, -4, s);
  const float d = PutHalf(b + 108, MaxAbs(s, 16) / 31, QuantFormat::kQ3_K);
  std::memset(b, 0, 108);
  for (int i = 0; i < 16; ++i) {
    const int sc = Code(s[i], Inverse(d), 0, -32, 31);
    const int u = sc + 32;  // 6 bits: low nibble in bytes 0-7, top pair in bytes 8-11.
    if (i < 8) {
      b[96 + i] |= static_cast<uint8_t>(u & 0xf);
    } else {
      b[96 + i - 8] |= static_cast<uint8_t>((u & 0xf) << 4);
    }
    b[96 + 8 + i % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (i / 4)));
    const float dl = d * static_cast<float>(sc);
    const int half = i / 8, plane = i / 2, part = i % 2;
    for (int l = 0; l < 16; ++l) {
      const int q = Code(x[16 * i + l], Inverse(dl), 0, -4, 3);
      const int idx = 16 * part + l;
      if (q >= 0) b[idx] |= static_cast<uint8_t>(1 << plane);
      b[32 + 32 * half + idx] |= static_cast<uint8_t>(((q + 4) & 3) << (2 * (plane % 4)));
    }
  }
}

// The 12-byte packing of eight 6-bit scales and mins (inverse of the decoder's ScaleMinK4).
void PackScaleMinK4(const int* sc, const int* mn, uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xf) | ((mn[j + 4] & 0xf) << 4));
  }
}

// Q4_K and Q5_K: eight sub-blocks of 32 with 6-bit scales and mins; `levels` = 15 or 31.
void QuantizeK4K5(const float* x, uint8_t* b, int levels, QuantFormat format, int* codes) {
  float s[8], m[8];
  AsymmetricScales(x, 32, 8, levels, s, m);
  const float d = PutHalf(b, *std::max_element(s, s + 8) / 63, format);
  const float dmin = PutHalf(b + 2, *std::max_element(m, m + 8) / 63, format);
  int sc[8], mc[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = Code(s[j], Inverse(d), 0, 0, 63);
    mc[j] = Code(m[j], Inverse(dmin), 0, 0, 63);
    const float dl = d * static_cast<float>(sc[j]), ml = dmin * static_cast<float>(mc[j]);
    for (int l = 0; l < 32; ++l)
      codes[32 * j + l] = Code(x[32 * j + l] + ml, Inverse(dl), 0, 0, levels);
  }
  PackScaleMinK4(sc, mc, b + 4);
}

void Q4_K(const float* x, uint8_t* b) {
  int q[256];
  QuantizeK4K5(x, b, 15, QuantFormat::kQ4_K, q);
  for (int t = 0; t < 4; ++t) {
    for (int l = 0; l < 32; ++l) {
      b[16 + 32 * t + l] = static_cast<uint8_t>(q[64 * t + l] | (q[64 * t + 32 + l] << 4));
    }
  }
}

void Q5_K(const float* x, uint8_t* b) {
  int q[256];
  QuantizeK4K5(x, b, 31, QuantFormat::kQ5_K, q);
  std::memset(b + 16, 0, 32);
  for (int t = 0; t < 4; ++t) {
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * t + l], hi = q[64 * t + 32 + l];
      b[48 + 32 * t + l] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
      b[16 + l] |= static_cast<uint8_t>(((lo >> 4) << (2 * t)) | ((hi >> 4) << (2 * t + 1)));
    }
  }
}

void Q6_K(const float* x, uint8_t* b) {
  float s[16];
  SymmetricScales(x, 16, 16, -32, s);
  const float d = PutHalf(b + 208, MaxAbs(s, 16) / 127, QuantFormat::kQ6_K);
  int sc[16];
  for (int i = 0; i < 16; ++i) {
    sc[i] = Code(s[i], Inverse(d), 0, -128, 127);
    b[192 + i] = static_cast<uint8_t>(static_cast<int8_t>(sc[i]));
  }
  std::memset(b, 0, 192);
  for (int half = 0; half < 2; ++half) {
    uint8_t* ql = b + 64 * half;
    uint8_t* qh = b + 128 + 32 * half;
    for (int p = 0; p < 4; ++p) {
      for (int l = 0; l < 32; ++l) {
        const int w = 128 * half + 32 * p + l;
        const float dl = d * static_cast<float>(sc[w / 16]);
        const int u = Code(x[w], Inverse(dl), 0, -32, 31) + 32;
        ql[l + 32 * (p % 2)] |= static_cast<uint8_t>((u & 0xf) << (4 * (p / 2)));
        qh[l] |= static_cast<uint8_t>((u >> 4) << (2 * p));
      }
    }
  }
}

void IQ4_XS(const float* x, uint8_t* b) {
  float s[8];
  SymmetricScales(x, 32, 8, -127, s);
  const float d = PutHalf(b, MaxAbs(s, 8) / 31, QuantFormat::kIQ4_XS);
  unsigned scales_h = 0;
  std::memset(b + 4, 0, 4);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = Code(s[ib], Inverse(d), 32, 0, 63);
    b[4 + ib / 2] |= static_cast<uint8_t>((ls & 0xf) << (4 * (ib % 2)));
    scales_h |= static_cast<unsigned>(ls >> 4) << (2 * ib);
    const float dl = d * static_cast<float>(ls - 32);
    const float* w = x + 32 * ib;
    for (int j = 0; j < 16; ++j) {
      b[8 + 16 * ib + j] =
          static_cast<uint8_t>(NearestIq4(w[j], dl) | (NearestIq4(w[j + 16], dl) << 4));
    }
  }
  b[2] = static_cast<uint8_t>(scales_h & 0xff);
  b[3] = static_cast<uint8_t>(scales_h >> 8);
}

using BlockEncoder = void (*)(const float*, uint8_t*);

BlockEncoder EncoderOf(QuantFormat format) {
  // In the order of kAllQuantFormats.
  static constexpr BlockEncoder kByFormat[] = {Q4_0, Q4_1, Q5_0, Q5_1,   Q8_0,   Q2_K, Q3_K,
                                               Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4};
  static_assert(std::size(kByFormat) == std::size(kAllQuantFormats));
  return kByFormat[QuantFormatIndex(format)];
}

}  // namespace

void Quantize(QuantFormat format, const float* weights, int64_t count, uint8_t* blocks) {
  const QuantFormatInfo& info = Info(format);
  const int64_t n_blocks = static_cast<int64_t>(QuantBytes(format, count)) / info.block_bytes;
  for (int64_t i = 0; i < count; ++i) {
    Check(std::isfinite(weights[i]), QuantFormatName(format), ": weight ", i, " is ", weights[i],
          "; only finite weights can be quantised");
  }
  const BlockEncoder encode = EncoderOf(format);
  for (int64_t b = 0; b < n_blocks; ++b) {
    encode(weights + b * info.block_elems, blocks + b * info.block_bytes);
  }
}

}  // namespace moex

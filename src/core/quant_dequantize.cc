// Dequantisation of GGML's block formats, written from the formats' definitions (block
// layouts in docs/formats/quantized.md). Each function decodes whole blocks; the arithmetic
// (scale × sub-scale first, then × the quantised value, minus the scaled minimum) follows
// the formats' definitions so that every decoder gives the same float for the same bytes.
#include <cmath>
#include <cstring>
#include <iterator>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant_format.h"

namespace moex {
namespace {

float Half(const uint8_t* p) {
  return F16ToF32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}
uint32_t ReadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // Little-endian hosts only (moex's targets are x86-64).
}

// 4-bit codebook of IQ4_NL / IQ4_XS (non-linear levels, scaled by the block's d).
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};
// FP4 E2M1 values (OCP MX) times two, so that a block's E8M0 exponent e scales by 2^(e-128).
constexpr int8_t kE2M1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Q4_0 / Q4_1 / IQ4_NL / MXFP4 share the nibble layout: byte j holds weight j (low nibble)
// and weight j + 16 (high nibble).
void Q4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((b[2 + j] & 0xf) - 8);
    y[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
  }
}

void Q4_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(b[4 + j] & 0xf) + m;
    y[j + 16] = d * static_cast<float>(b[4 + j] >> 4) + m;
  }
}

// Q5: the fifth bit of weight j is bit j of the 32-bit qh.
void Q5_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint32_t qh = ReadU32(b + 2);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[6 + j] & 0xf) | static_cast<int>(((qh >> j) & 1) << 4);
    const int hi = (b[6 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(hi - 16);
  }
}

void Q5_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  const uint32_t qh = ReadU32(b + 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[8 + j] & 0xf) | static_cast<int>(((qh >> j) & 1) << 4);
    const int hi = (b[8 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo) + m;
    y[j + 16] = d * static_cast<float>(hi) + m;
  }
}

void Q8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

// Q2_K: 16 sub-blocks of 16; byte `scales[i]` holds sub-block i's 4-bit scale (low) and
// 4-bit min (high). Each 32-byte group of qs holds four 2-bit planes (shift 0, 2, 4, 6), each
// plane being two sub-blocks (bytes 0-15, 16-31).
void Q2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = Half(b + 80), dmin = Half(b + 82);
  int is = 0;
  for (int half = 0; half < 2; ++half, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part, ++is) {
        const float dl = d * static_cast<float>(scales[is] & 0xf);
        const float ml = dmin * static_cast<float>(scales[is] >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// The 6-bit scales of Q3_K: sixteen values packed in 12 bytes. Bytes 0-7 hold the low four
// bits (scale i in byte i % 8, low nibble for i < 8, high nibble for i >= 8); bytes 8-11 hold
// the top two bits (scale i in byte 8 + i % 4, bit pair i / 4).
void UnpackQ3Scales(const uint8_t* packed, int* scales) {
  for (int i = 0; i < 16; ++i) {
    const int low = (i < 8) ? (packed[i] & 0xf) : (packed[i - 8] >> 4);
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    scales[i] = (low | (high << 4)) - 32;
  }
}

// Q3_K: weights are 3-bit signed (-4..3): two bits in qs (same planes as Q2_K) and a high
// bit in hmask (bit `plane` of byte l; set = no offset, clear = minus 4).
void Q3_K(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* q = b + 32;
  int scales[16];
  UnpackQ3Scales(b + 96, scales);
  const float d = Half(b + 108);
  int is = 0;
  int plane = 0;
  for (int half = 0; half < 2; ++half, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, ++plane) {
      for (int part = 0; part < 2; ++part, ++is) {
        const float dl = d * static_cast<float>(scales[is]);
        for (int l = 0; l < 16; ++l) {
          const int idx = 16 * part + l;
          const int v = ((q[idx] >> shift) & 3) - (((hmask[idx] >> plane) & 1) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
    }
  }
}

// Q4_K/Q5_K: eight sub-blocks of 32, each with a 6-bit scale and a 6-bit min packed in 12
// bytes: for j < 4, scale = byte j & 63 and min = byte j + 4 & 63; for j >= 4, the low four
// bits come from byte j + 4 (scale low nibble, min high nibble) and the top two from the
// spare bits 6-7 of bytes j - 4 (scale) and j (min).
void ScaleMinK4(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void Q4_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* packed = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0; j < 8; j += 2, q += 32) {
    int sc, m;
    ScaleMinK4(j, packed, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    ScaleMinK4(j + 1, packed, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xf) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K: as Q4_K plus a fifth bit per weight: weight l of sub-block j is bit j of qh[l].
void Q5_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* packed = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + 48;
  for (int j = 0; j < 8; j += 2, q += 32) {
    int sc, m;
    ScaleMinK4(j, packed, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    ScaleMinK4(j + 1, packed, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((q[l] & 0xf) | (((qh[l] >> j) & 1) << 4)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((q[l] >> 4) | (((qh[l] >> (j + 1)) & 1) << 4)) - m2;
    }
  }
}

// Q6_K: 6-bit signed weights (-32..31) in two halves of 128; in a half, weight l + 32 * p
// (p = 0..3) takes its low four bits from ql (byte l for p = 0, 2 and byte l + 32 for p = 1,
// 3; low nibble for p < 2) and its top two bits from bits 2p of qh[l]; int8 scales per 16.
void Q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

void IQ4_NL(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Levels[b[2 + j] & 0xf]);
    y[j + 16] = d * static_cast<float>(kIq4Levels[b[2 + j] >> 4]);
  }
}

// IQ4_XS: eight sub-blocks of 32 with 6-bit scales (minus 32): the low four bits in
// scales_l (nibble ib % 2 of byte ib / 2), the top two in bits 2ib of the u16 scales_h.
void IQ4_XS(const uint8_t* b, float* y) {
  const float d = Half(b);
  const unsigned scales_h = static_cast<unsigned>(b[2] | (b[3] << 8));
  const uint8_t* scales_l = b + 4;
  const uint8_t* q = b + 8;
  for (int ib = 0; ib < 8; ++ib, q += 16, y += 32) {
    const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) |
                   static_cast<int>(((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kIq4Levels[q[j] & 0xf]);
      y[j + 16] = dl * static_cast<float>(kIq4Levels[q[j] >> 4]);
    }
  }
}

void MXFP4(const uint8_t* b, float* y) {
  const float d = std::ldexp(1.0f, static_cast<int>(b[0]) - 128);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kE2M1Doubled[b[1 + j] & 0xf]);
    y[j + 16] = d * static_cast<float>(kE2M1Doubled[b[1 + j] >> 4]);
  }
}

using BlockDecoder = void (*)(const uint8_t*, float*);

BlockDecoder DecoderOf(QuantFormat format) {
  // In the order of kAllQuantFormats.
  static constexpr BlockDecoder kByFormat[] = {Q4_0, Q4_1, Q5_0, Q5_1,   Q8_0,   Q2_K, Q3_K,
                                               Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4};
  static_assert(std::size(kByFormat) == std::size(kAllQuantFormats));
  return kByFormat[QuantFormatIndex(format)];
}

}  // namespace

void Dequantize(QuantFormat format, const uint8_t* blocks, int64_t count, float* out) {
  const QuantFormatInfo& info = Info(format);
  const int64_t n_blocks = static_cast<int64_t>(QuantBytes(format, count)) / info.block_bytes;
  const BlockDecoder decode = DecoderOf(format);
  for (int64_t b = 0; b < n_blocks; ++b) {
    decode(blocks + b * info.block_bytes, out + b * info.block_elems);
  }
}

}  // namespace moex

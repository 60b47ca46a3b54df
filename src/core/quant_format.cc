#include "core/quant_format.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <iterator>

#include "core/dtype.h"
#include "core/error.h"

namespace moex {

const QuantFormatInfo& Info(QuantFormat format) {
  // Block sizes from the formats' definitions: f16 scales are 2 bytes, k-quants hold 256
  // weights in sub-blocks of 16 or 32.
  static const QuantFormatInfo kQ4_0{"q4_0", 32, 2 + 16};
  static const QuantFormatInfo kQ4_1{"q4_1", 32, 2 + 2 + 16};
  static const QuantFormatInfo kQ5_0{"q5_0", 32, 2 + 4 + 16};
  static const QuantFormatInfo kQ5_1{"q5_1", 32, 2 + 2 + 4 + 16};
  static const QuantFormatInfo kQ8_0{"q8_0", 32, 2 + 32};
  static const QuantFormatInfo kQ2_K{"q2_K", 256, 16 + 64 + 2 + 2};
  static const QuantFormatInfo kQ3_K{"q3_K", 256, 32 + 64 + 12 + 2};
  static const QuantFormatInfo kQ4_K{"q4_K", 256, 2 + 2 + 12 + 128};
  static const QuantFormatInfo kQ5_K{"q5_K", 256, 2 + 2 + 12 + 32 + 128};
  static const QuantFormatInfo kQ6_K{"q6_K", 256, 128 + 64 + 16 + 2};
  static const QuantFormatInfo kIQ4_NL{"iq4_nl", 32, 2 + 16};
  static const QuantFormatInfo kIQ4_XS{"iq4_xs", 256, 2 + 2 + 4 + 128};
  static const QuantFormatInfo kMXFP4{"mxfp4", 32, 1 + 16};
  switch (format) {
    case QuantFormat::kQ4_0:
      return kQ4_0;
    case QuantFormat::kQ4_1:
      return kQ4_1;
    case QuantFormat::kQ5_0:
      return kQ5_0;
    case QuantFormat::kQ5_1:
      return kQ5_1;
    case QuantFormat::kQ8_0:
      return kQ8_0;
    case QuantFormat::kQ2_K:
      return kQ2_K;
    case QuantFormat::kQ3_K:
      return kQ3_K;
    case QuantFormat::kQ4_K:
      return kQ4_K;
    case QuantFormat::kQ5_K:
      return kQ5_K;
    case QuantFormat::kQ6_K:
      return kQ6_K;
    case QuantFormat::kIQ4_NL:
      return kIQ4_NL;
    case QuantFormat::kIQ4_XS:
      return kIQ4_XS;
    case QuantFormat::kMXFP4:
      return kMXFP4;
  }
  Fail("unknown quantised format id ", static_cast<uint32_t>(format));
}

size_t QuantFormatIndex(QuantFormat format) {
  for (size_t i = 0; i < std::size(kAllQuantFormats); ++i) {
    if (kAllQuantFormats[i] == format) return i;
  }
  Fail("unknown quantised format id ", static_cast<uint32_t>(format));
}

std::optional<QuantFormat> QuantFormatOfGgmlType(uint32_t ggml_type) {
  for (QuantFormat f : kAllQuantFormats) {
    if (static_cast<uint32_t>(f) == ggml_type) return f;
  }
  return std::nullopt;
}

namespace {
// DType values in kAllQuantFormats order.
constexpr DType kDTypeOfFormat[] = {
    DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,   DType::kQ5_1,   DType::kQ8_0,
    DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,   DType::kQ5_K,   DType::kQ6_K,
    DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};
static_assert(std::size(kDTypeOfFormat) == std::size(kAllQuantFormats));
}  // namespace

DType DTypeOf(QuantFormat format) {
  return kDTypeOfFormat[QuantFormatIndex(format)];
}

std::optional<QuantFormat> QuantFormatOf(DType dtype) {
  for (size_t i = 0; i < std::size(kAllQuantFormats); ++i) {
    if (kDTypeOfFormat[i] == dtype) return kAllQuantFormats[i];
  }
  return std::nullopt;
}

std::optional<QuantFormat> ParseQuantFormat(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (QuantFormat f : kAllQuantFormats) {
    std::string known = Info(f).name;
    std::transform(known.begin(), known.end(), known.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (known == lower) return f;
  }
  return std::nullopt;
}

size_t QuantBytes(QuantFormat format, int64_t count) {
  const QuantFormatInfo& info = Info(format);
  Check(count >= 0 && count % info.block_elems == 0, info.name, " holds weights in blocks of ",
        info.block_elems, "; ", count, " is not a multiple");
  return static_cast<size_t>(count / info.block_elems) * info.block_bytes;
}

namespace {

uint16_t ReadU16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
bool FiniteF16(uint16_t h) {
  return ((h >> 10) & 0x1f) != 0x1f;
}

}  // namespace

std::optional<int64_t> FindNonFiniteScale(QuantFormat format, const uint8_t* blocks,
                                          int64_t count) {
  const QuantFormatInfo& info = Info(format);
  const int64_t n_blocks = static_cast<int64_t>(QuantBytes(format, count)) / info.block_bytes;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* p = blocks + b * info.block_bytes;
    bool finite = true;
    switch (format) {
      case QuantFormat::kQ4_0:
      case QuantFormat::kQ5_0:
      case QuantFormat::kQ8_0:
      case QuantFormat::kIQ4_NL:
      case QuantFormat::kIQ4_XS:
        finite = FiniteF16(ReadU16(p));
        break;
      case QuantFormat::kQ4_1:
      case QuantFormat::kQ5_1:
      case QuantFormat::kQ4_K:
      case QuantFormat::kQ5_K:
        finite = FiniteF16(ReadU16(p)) && FiniteF16(ReadU16(p + 2));
        break;
      case QuantFormat::kQ2_K:
        finite = FiniteF16(ReadU16(p + 80)) && FiniteF16(ReadU16(p + 82));
        break;
      case QuantFormat::kQ3_K:
        finite = FiniteF16(ReadU16(p + 108));
        break;
      case QuantFormat::kQ6_K:
        finite = FiniteF16(ReadU16(p + 208));
        break;
      case QuantFormat::kMXFP4:
        finite = p[0] != 0xff;
        break;  // E8M0: 0xFF is NaN.
    }
    if (!finite) return b;
  }
  return std::nullopt;
}

}  // namespace moex

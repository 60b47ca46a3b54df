// GGML's block-quantised weight formats (the types llama.cpp writes into GGUF files), named
// by their GGML type ids: what a block holds and how many bytes it takes. Dequantisation and
// a simple quantiser for each are in quant_dequantize.cc and quant_quantize.cc; the block
// layouts are documented in docs/formats/quantized.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace moex {

enum class QuantFormat : uint32_t {
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kMXFP4 = 39,
};

// Every supported format, in GGML id order.
inline constexpr QuantFormat kAllQuantFormats[] = {
    QuantFormat::kQ4_0, QuantFormat::kQ4_1, QuantFormat::kQ5_0,   QuantFormat::kQ5_1,
    QuantFormat::kQ8_0, QuantFormat::kQ2_K, QuantFormat::kQ3_K,   QuantFormat::kQ4_K,
    QuantFormat::kQ5_K, QuantFormat::kQ6_K, QuantFormat::kIQ4_NL, QuantFormat::kIQ4_XS,
    QuantFormat::kMXFP4};

struct QuantFormatInfo {
  const char* name;  // As llama.cpp names the type: "q4_K", "iq4_xs", "mxfp4".
  int block_elems;   // Weights per block (32, or 256 for the k-quants and iq4_xs).
  int block_bytes;
};

const QuantFormatInfo& Info(QuantFormat format);
// The position of `format` in kAllQuantFormats (for per-format tables).
size_t QuantFormatIndex(QuantFormat format);
inline const char* QuantFormatName(QuantFormat format) {
  return Info(format).name;
}

// The format of a GGML type id, or nullopt for ids that are not block formats moex reads.
std::optional<QuantFormat> QuantFormatOfGgmlType(uint32_t ggml_type);
// Case-insensitive name ("Q4_K", "q4_k", "mxfp4"); nullopt for unknown names.
std::optional<QuantFormat> ParseQuantFormat(std::string_view name);

// The DType that holds `format` (every format is one), and back (nullopt for float dtypes).
DType DTypeOf(QuantFormat format);
std::optional<QuantFormat> QuantFormatOf(DType dtype);

// Bytes of `count` weights; throws Error unless count is a multiple of the block size.
size_t QuantBytes(QuantFormat format, int64_t count);

// Dequantises `count` weights (a multiple of the block size) from `blocks` into `out`.
// Blocks are decoded exactly as the format defines them; a non-finite scale decodes to
// non-finite weights (use FindNonFiniteScale to refuse such data at load).
void Dequantize(QuantFormat format, const uint8_t* blocks, int64_t count, float* out);

// Quantises `count` weights (a multiple of the block size) into valid blocks of `format`.
// A simple round-to-nearest encoder: any valid encoding is enough for test models, it need
// not match llama-quantize. Throws Error for non-finite weights or a scale the format's f16
// cannot hold.
void Quantize(QuantFormat format, const float* weights, int64_t count, uint8_t* blocks);

// The index of the first block whose scale (f16 d/dmin, or MXFP4's E8M0 exponent 0xFF) is
// not finite, or nullopt when every block decodes to finite weights' scales.
std::optional<int64_t> FindNonFiniteScale(QuantFormat format, const uint8_t* blocks, int64_t count);

}  // namespace moex

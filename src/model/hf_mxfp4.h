// HF's MXFP4 blocks (transformers' integrations/mxfp4, openai/gpt-oss checkpoints) and GGML's
// (DType::kMXFP4, core/quant_format.h), the same numbers packed two ways:
//   HF:   a _blocks tensor [..., n, 16] of e2m1 codes, element 2j in the low nibble of byte
//         j and element 2j + 1 in its high nibble, and a _scales tensor [..., n] of E8M0
//         exponents s: element = e2m1(code) * 2^(s - 127).
//   GGML: 17-byte blocks, the E8M0 byte first, then byte j holding element j (low nibble)
//         and element j + 16 (high nibble); moex decodes 2^(s - 128) * 2 e2m1(code).
// Both keep the exponent byte as is and the codes unchanged, so converting is a lossless
// shuffle of nibbles: the weights decode to the same floats either way.
#pragma once

#include <cstdint>

namespace moex {

constexpr int kHfMxfp4BlockBytes = 16;    // 32 codes; the exponent is in _scales.
constexpr int kGgmlMxfp4BlockBytes = 17;  // Info(QuantFormat::kMXFP4).block_bytes.

// One block: HF's 16 code bytes and exponent -> GGML's 17-byte block.
void HfToGgmlMxfp4Block(const uint8_t* codes, uint8_t scale, uint8_t* block);
// And back.
void GgmlToHfMxfp4Block(const uint8_t* block, uint8_t* codes, uint8_t* scale);

}  // namespace moex

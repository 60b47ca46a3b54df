#include "model/hf_mxfp4.h"

namespace moex {

namespace {

// Element i's code in HF's packing, and in GGML's (which skips the exponent byte).
uint8_t HfCode(const uint8_t* codes, int i) {
  return static_cast<uint8_t>((codes[i / 2] >> (4 * (i % 2))) & 0xf);
}
uint8_t GgmlCode(const uint8_t* block, int i) {
  return static_cast<uint8_t>((block[1 + i % 16] >> (4 * (i / 16))) & 0xf);
}

}  // namespace

void HfToGgmlMxfp4Block(const uint8_t* codes, uint8_t scale, uint8_t* block) {
  block[0] = scale;
  for (int j = 0; j < 16; ++j)
    block[1 + j] = static_cast<uint8_t>(HfCode(codes, j) | (HfCode(codes, j + 16) << 4));
}

void GgmlToHfMxfp4Block(const uint8_t* block, uint8_t* codes, uint8_t* scale) {
  *scale = block[0];
  for (int j = 0; j < 16; ++j)
    codes[j] = static_cast<uint8_t>(GgmlCode(block, 2 * j) | (GgmlCode(block, 2 * j + 1) << 4));
}

}  // namespace moex

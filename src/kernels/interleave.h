// q4_0 and q8_0 matrices regrouped eight rows at a time for the int8 Linear kernels
// (int8_dot-inl.h, Interleaved8): per group of eight rows and per 32-weight block, the
// eight rows' f16 scales (16 bytes), then their codes in chunks of four bytes per row
// (chunk j holds code bytes 4j..4j+3 of rows 0..7, 32 bytes). The same bytes as the file's
// blocks, moved; a last group of fewer than eight rows is padded with zero blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace moex::kernels {

// Bytes of one block of a group of eight rows (eight f16 scales, eight rows' codes), 0 for a
// dtype that is not interleaved.
constexpr size_t InterleavedBlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:
      return 16 + 8 * 16;
    case DType::kQ8_0:
      return 16 + 8 * 32;
    default:
      return 0;
  }
}

// Bytes of the interleaved copy of a [rows, cols] matrix (whole groups of eight rows).
size_t InterleavedBytes(DType dtype, int64_t rows, int64_t cols);

// The interleaved copy of a row-major [rows, cols] matrix of q4_0 or q8_0 blocks, written to
// `out` (InterleavedBytes of it, zeroed beforehand: the padding rows stay zero) or returned.
void InterleaveRows(const std::byte* w, DType dtype, int64_t rows, int64_t cols, std::byte* out);
std::vector<std::byte> InterleaveRows(const std::byte* w, DType dtype, int64_t rows, int64_t cols);

}  // namespace moex::kernels

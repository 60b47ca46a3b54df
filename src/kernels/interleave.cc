#include "kernels/interleave.h"

#include <cstring>

#include "core/error.h"

namespace moex::kernels {

size_t InterleavedBytes(DType dtype, int64_t rows, int64_t cols) {
  const size_t group_block = InterleavedBlockBytes(dtype);
  Check(group_block != 0, "InterleaveRows: ", DTypeName(dtype), " is not interleaved");
  Check(rows >= 0 && cols >= 0 && cols % 32 == 0, "InterleaveRows: shape [", rows, ", ", cols,
        "] is not whole blocks of 32");
  return static_cast<size_t>((rows + 7) / 8) * static_cast<size_t>(cols / 32) * group_block;
}

void InterleaveRows(const std::byte* w, DType dtype, int64_t rows, int64_t cols, std::byte* out) {
  InterleavedBytes(dtype, rows, cols);  // Checks the dtype and shape.
  const size_t group_block = InterleavedBlockBytes(dtype);
  const size_t blocks = static_cast<size_t>(cols / 32);
  const size_t groups = static_cast<size_t>((rows + 7) / 8);
  const size_t block_bytes = DTypeBytes(dtype, 32), code_bytes = block_bytes - 2;
  const size_t row_bytes = DTypeBytes(dtype, cols);
  for (size_t g = 0; g < groups; ++g) {
    for (size_t k = 0; k < blocks; ++k) {
      std::byte* dst = out + (g * blocks + k) * group_block;
      for (size_t r = 0; r < 8; ++r) {
        const size_t row = g * 8 + r;
        if (row >= static_cast<size_t>(rows)) break;
        const std::byte* src = w + row * row_bytes + k * block_bytes;
        std::memcpy(dst + 2 * r, src, 2);
        for (size_t j = 0; j < code_bytes / 4; ++j)
          std::memcpy(dst + 16 + 32 * j + 4 * r, src + 2 + 4 * j, 4);
      }
    }
  }
}

std::vector<std::byte> InterleaveRows(const std::byte* w, DType dtype, int64_t rows, int64_t cols) {
  std::vector<std::byte> out(InterleavedBytes(dtype, rows, cols));  // Zero: padding rows.
  InterleaveRows(w, dtype, rows, cols, out.data());
  return out;
}

}  // namespace moex::kernels

// Huge-page-backed buffers (core/huge_pages.h, AlignedBuffer's large path): aligned to a huge
// page, zero-filled without a memset, writable to the last byte, released on destruction and
// when moved over.
#include "core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "core/aligned_buffer.h"

namespace moex {
namespace {

bool AllZero(const std::byte* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != std::byte{0}) return false;
  return true;
}

TEST(HugePages, MappingIsAlignedZeroAndWritableToItsLastByte) {
  const size_t bytes = kHugePageBytes + 12345;  // one huge page and a 4 KiB-page tail
  std::byte* p = MapHugePages(bytes);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  const size_t mapped = (bytes + 4095) / 4096 * 4096;
  EXPECT_TRUE(AllZero(p, mapped));
  std::memset(p, 0x5a, mapped);
  EXPECT_EQ(p[mapped - 1], std::byte{0x5a});
  UnmapHugePages(p, bytes);
}

TEST(HugePages, LargeAlignedBufferIsZeroAlignedAndMovable) {
  AlignedBuffer a(3 * kHugePageBytes + 7);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), 3 * kHugePageBytes + 7);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kHugePageBytes, 0u);
  EXPECT_TRUE(AllZero(a.data(), a.size()));
  a.data()[a.size() - 1] = std::byte{9};

  // Moving a large buffer over a small one and back: each is released by the kind of
  // allocation it came from (munmap or free), which ASan checks.
  AlignedBuffer small(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % AlignedBuffer::kAlignment, 0u);
  EXPECT_TRUE(AllZero(small.data(), small.size()));
  small = std::move(a);
  EXPECT_EQ(small.size(), 3 * kHugePageBytes + 7);
  EXPECT_EQ(small.data()[small.size() - 1], std::byte{9});
  AlignedBuffer moved(std::move(small));
  EXPECT_EQ(small.data(), nullptr);
  EXPECT_EQ(moved.data()[moved.size() - 1], std::byte{9});
}

}  // namespace
}  // namespace moex

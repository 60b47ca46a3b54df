#include "core/checksum.h"

#include <cstring>

namespace moex {

namespace {

constexpr uint64_t kMulA = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio.
constexpr uint64_t kMulB = 0xD6E8FEB86659FD93ull;  // An odd constant with balanced bits.

inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 32;
  h *= kMulB;
  h ^= h >> 29;
  h *= kMulA;
  return h ^ (h >> 32);
}

}  // namespace

uint64_t Checksum64(std::span<const std::byte> bytes) {
  // Eight Fletcher-style lane pairs: a += word, b += a. Only additions, so the loop runs at
  // memory speed (vectorised), and any changed word changes `a`, any moved word `b`.
  constexpr int kLanes = 8;
  uint64_t a[kLanes] = {}, b[kLanes] = {};
  const std::byte* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 8 * kLanes) {
    uint64_t w[kLanes];
    std::memcpy(w, p, sizeof w);
    for (int i = 0; i < kLanes; ++i) {
      a[i] += w[i];
      b[i] += a[i];
    }
    p += sizeof w;
    n -= sizeof w;
  }
  uint64_t tail[kLanes] = {};
  std::memcpy(tail, p, n);
  for (int i = 0; i < kLanes; ++i) {
    a[i] += tail[i];
    b[i] += a[i];
  }
  uint64_t h = bytes.size();
  for (int i = 0; i < kLanes; ++i) {
    h = Avalanche(h ^ (a[i] + static_cast<uint64_t>(i) * kMulA));
    h = Avalanche(h ^ b[i]);
  }
  return h;
}

}  // namespace moex

#include "io/expert_store_format.h"

#include <cstring>
#include <numeric>

namespace moex {

namespace {

constexpr uint64_t kMulA = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio.
constexpr uint64_t kMulB = 0xD6E8FEB86659FD93ull;  // An odd constant with balanced bits.

inline uint64_t Mix(uint64_t lane, uint64_t word) {
  lane ^= word;
  lane *= kMulA;
  return lane ^ (lane >> 29);
}

inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 32;
  h *= kMulB;
  h ^= h >> 29;
  h *= kMulA;
  return h ^ (h >> 32);
}

}  // namespace

uint64_t StoreChecksum(std::span<const std::byte> bytes) {
  uint64_t lane[4] = {1, 2, 3, 4};
  const std::byte* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 32) {
    uint64_t w[4];
    std::memcpy(w, p, 32);
    for (int i = 0; i < 4; ++i) lane[i] = Mix(lane[i], w[i]);
    p += 32;
    n -= 32;
  }
  uint64_t tail[4] = {0, 0, 0, 0};
  std::memcpy(tail, p, n);
  for (int i = 0; i < 4; ++i) lane[i] = Mix(lane[i], tail[i]);
  uint64_t h = bytes.size();
  for (int i = 0; i < 4; ++i) h = Avalanche(h ^ (lane[i] + static_cast<uint64_t>(i) * kMulB));
  return h;
}

uint32_t StoreBlockNeurons(uint64_t record_bytes, uint32_t neurons) {
  const uint64_t per_unit = kStoreAlignment / std::gcd(record_bytes, kStoreAlignment);
  return per_unit >= neurons ? neurons : static_cast<uint32_t>(per_unit);
}

}  // namespace moex

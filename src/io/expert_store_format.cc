#include "io/expert_store_format.h"

#include <numeric>

#include "core/checksum.h"

namespace moex {

uint64_t StoreChecksum(std::span<const std::byte> bytes) { return Checksum64(bytes); }

uint32_t StoreBlockNeurons(uint64_t record_bytes, uint32_t neurons) {
  const uint64_t per_unit = kStoreAlignment / std::gcd(record_bytes, kStoreAlignment);
  return per_unit >= neurons ? neurons : static_cast<uint32_t>(per_unit);
}

}  // namespace moex

#include "io/expert_store_format.h"

#include <numeric>

#include "core/checksum.h"

namespace moex {

uint64_t StoreChecksum(std::span<const std::byte> bytes) { return Checksum64(bytes); }

uint32_t StoreBlockNeurons(uint64_t record_bytes, uint32_t neurons, uint32_t granule) {
  const uint64_t per_unit =
      std::lcm(kStoreAlignment / std::gcd(record_bytes, kStoreAlignment), uint64_t{granule});
  return per_unit >= neurons ? neurons : static_cast<uint32_t>(per_unit);
}

}  // namespace moex

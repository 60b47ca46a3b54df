// The project's 64-bit checksum (expert store blocks, trace records, policy state): eight
// Fletcher-style lane pairs over 8-byte words (additions only, so a block can be verified
// as it lands at memory speed), folded with a multiply-xorshift avalanche.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace moex {

uint64_t Checksum64(std::span<const std::byte> bytes);

}  // namespace moex

// The on-disk format of the expert store (docs/expert-store.md): a 4 KiB header, a table
// with one checksum per expert and per block, then every routed expert packed neuron-major,
// each starting on a 4 KiB boundary so any block-aligned neuron range is O_DIRECT-readable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace moex {

constexpr char kExpertStoreMagic[8] = {'M', 'O', 'E', 'X', 'S', 'T', 'O', 'R'};
// 4: each MoE layer names its gate/up and down dtypes (mixed block formats, padded to one
// record geometry: model/expert_layout.h). 3: one dtype for every record. Version 2
// requantised q8_0 down columns along d.
constexpr uint32_t kExpertStoreVersion = 4;
constexpr uint32_t kMaxStoreMoeLayers = 512;  // Entries of StoreHeader::layer_dtypes.
constexpr uint64_t kStoreAlignment = 4096;  // O_DIRECT offset, length and buffer alignment.
constexpr size_t kStoreHeaderBytes = 4096;

inline uint64_t AlignUp(uint64_t n, uint64_t a) {
  return (n + a - 1) / a * a;
}

// Fixed-size little-endian header at offset 0. Plain data: written and read with memcpy.
struct StoreHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  char arch[32];            // HF model_type of the source.
  uint32_t group_neurons;   // Neurons per record group (1 for f32/f16/bf16 records).
  uint32_t num_layers;      // All decoder layers.
  uint32_t num_moe_layers;  // Layers with routed experts (listed in the table).
  uint32_t num_experts;     // Routed experts per MoE layer.
  uint32_t hidden_size;     // d.
  uint32_t neurons;         // F, neurons per expert.
  uint32_t record_bytes;    // One neuron record: [gate row | up row | down column]
                            // (block formats: a group's average, padding included).
  uint32_t block_neurons;   // Checksum and alignment granule: block_neurons * record_bytes
                            // is a multiple of kStoreAlignment (or the block is the expert).
  uint64_t expert_stride;   // Bytes between consecutive experts (aligned).
  uint64_t table_offset;
  uint64_t table_bytes;
  uint64_t data_offset;
  uint64_t file_bytes;      // Exact size of a complete store.
  uint64_t table_checksum;  // StoreChecksum over the table bytes.
  uint64_t created_unix;
  char source_id[128];       // Fingerprint of the source checkpoint (names, sizes, mtimes).
  char source_path[1024];    // Where the source was, for messages only.
  // Per MoE layer (in order): the moex::DType of its gate/up rows, then of its down runs.
  uint8_t layer_dtypes[2 * kMaxStoreMoeLayers];
  uint64_t header_checksum;  // StoreChecksum over this struct with this field zeroed.
};
static_assert(sizeof(StoreHeader) <= kStoreHeaderBytes);

// 64-bit checksum used for header, table and blocks: Checksum64 (core/checksum.h).
uint64_t StoreChecksum(std::span<const std::byte> bytes);

// Smallest multiple of `granule` neurons (a record group: the block size of a block format)
// whose records fill a whole number of alignment units, capped at F.
uint32_t StoreBlockNeurons(uint64_t record_bytes, uint32_t neurons, uint32_t granule = 1);

}  // namespace moex

// Read access to a packed expert store: validates header and table on open, answers where
// each expert and block lies, and checks whether the store still matches its source.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/expert_store_format.h"

namespace moex {

class ExpertStore {
 public:
  // Reads and checks the header and table (not the expert data): magic, version, checksums,
  // and that the file is exactly as long as the header says. Throws Error naming the fault.
  static ExpertStore Open(const std::string& path);

  const std::string& path() const { return path_; }
  const StoreHeader& header() const { return header_; }
  // The dtypes of a decoder layer's routed experts (gate/up rows; down runs). The layer must
  // be a MoE layer.
  DType gate_up_dtype(int layer) const;
  DType down_dtype(int layer) const;
  uint32_t group_neurons() const { return header_.group_neurons; }
  int num_experts() const { return static_cast<int>(header_.num_experts); }
  int neurons() const { return static_cast<int>(header_.neurons); }
  uint64_t record_bytes() const { return header_.record_bytes; }
  uint64_t expert_bytes() const { return record_bytes() * header_.neurons; }
  uint32_t block_neurons() const { return header_.block_neurons; }
  int blocks_per_expert() const {
    return static_cast<int>((header_.neurons + header_.block_neurons - 1) / header_.block_neurons);
  }
  const std::vector<int>& moe_layers() const { return moe_layers_; }
  // Index of `layer` among the MoE layers, or -1 when it has no routed experts.
  int MoeIndex(int layer) const;
  // Total bytes of all routed experts (without alignment padding).
  uint64_t TotalExpertBytes() const {
    return expert_bytes() * header_.num_experts * header_.num_moe_layers;
  }

  uint64_t ExpertOffset(int layer, int expert) const;
  uint64_t ExpertChecksum(int layer, int expert) const;
  uint64_t BlockChecksum(int layer, int expert, int block) const;

  // Reads every expert and checks every block checksum (a full scan of the file). Throws
  // Error naming the first corrupt expert. progress(done, total) is called per expert.
  void VerifyData(const std::function<void(uint64_t, uint64_t)>& progress = {}) const;

 private:
  size_t EntryIndex(int layer, int expert) const;

  std::string path_;
  StoreHeader header_{};
  std::vector<int> moe_layers_;
  std::vector<int> moe_index_;       // Per decoder layer.
  std::vector<uint64_t> checksums_;  // Per expert: [expert checksum, block checksums...].
};

// The table's byte layout, shared by the packer and the reader: the MoE layer ids as
// uint32 (padded to 8 bytes), then per (MoE layer, expert) one uint64 expert checksum
// followed by one uint64 per block. The expert checksum is StoreChecksum of its block sums.
uint64_t StoreTableBytes(uint32_t num_moe_layers, uint32_t num_experts, uint32_t blocks);

}  // namespace moex

// libFuzzer target: an expert store file (header, checksum table, expert data). The header
// and table checksums are recomputed over the input first -- otherwise nearly every mutant
// stops at the header checksum and the fields behind it are never reached. A store that
// opens must answer every offset and checksum query inside the file, and VerifyData must
// read it through or throw.
#include <cstring>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "io/expert_store.h"
#include "io/expert_store_format.h"

namespace {

// Makes the header and table checksums agree with the (mutated) bytes they cover.
void FixChecksums(std::vector<uint8_t>& bytes) {
  using namespace moex;
  if (bytes.size() < sizeof(StoreHeader)) return;
  StoreHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.table_offset <= bytes.size() && h.table_bytes <= bytes.size() - h.table_offset) {
    h.table_checksum = StoreChecksum(std::as_bytes(
        std::span(bytes.data() + h.table_offset, static_cast<size_t>(h.table_bytes))));
  }
  h.header_checksum = 0;
  h.header_checksum = StoreChecksum(std::as_bytes(std::span(&h, 1)));
  std::memcpy(bytes.data(), &h, sizeof h);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moex;
  static fuzz::ScratchFile scratch(".moex");
  std::vector<uint8_t> bytes(data, data + size);
  FixChecksums(bytes);
  const std::string& path = scratch.Write(bytes.data(), bytes.size());
  return fuzz::ExpectOnlyMoexErrors([&] {
    const ExpertStore store = ExpertStore::Open(path);
    for (int layer : store.moe_layers()) {
      fuzz::Expect(store.MoeIndex(layer) >= 0, "listed MoE layer has no index");
      for (int e = 0; e < store.num_experts(); ++e) {
        const uint64_t offset = store.ExpertOffset(layer, e);
        fuzz::Expect(offset >= store.header().data_offset && offset <= bytes.size() &&
                         store.expert_bytes() <= bytes.size() - offset,
                     "expert outside the file");
        (void)store.ExpertChecksum(layer, e);
        for (int b = 0; b < store.blocks_per_expert(); ++b) (void)store.BlockChecksum(layer, e, b);
      }
    }
    store.VerifyData();
  });
}

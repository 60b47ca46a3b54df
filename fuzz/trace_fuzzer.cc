// libFuzzer target: a routing trace file (trace/trace_format.h). The header and record
// checksums are recomputed over the input first, so mutants reach the JSON header, the
// tensor records and the event decoder instead of stopping at a checksum. A trace that opens
// is read to its end and once more after Rewind, as the simulator does.
#include <cstring>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "io/expert_store_format.h"
#include "trace/trace_reader.h"

namespace {

uint64_t Sum(const std::vector<uint8_t>& b, size_t at, size_t n) {
  return moex::StoreChecksum(std::as_bytes(std::span(b.data() + at, n)));
}

// Walks the frame layout as far as the lengths allow and rewrites each checksum field.
void FixChecksums(std::vector<uint8_t>& b) {
  size_t at = 8;  // Magic.
  if (b.size() < at + 8) return;
  uint32_t version, length;
  std::memcpy(&version, b.data() + at, 4);
  std::memcpy(&length, b.data() + at + 4, 4);
  at += 8;
  if (length > b.size() - at) return;
  const size_t json = at;
  at += length;
  if (version >= 2) {
    if (b.size() - at < 8) return;
    const uint64_t sum = Sum(b, json, length);
    std::memcpy(b.data() + at, &sum, 8);
    at += 8;
  }
  while (b.size() - at >= 24) {  // tag, reserved, length, checksum; then the payload.
    uint64_t payload;
    std::memcpy(&payload, b.data() + at + 8, 8);
    if (payload > b.size() - at - 24) return;
    const uint64_t sum = Sum(b, at + 24, static_cast<size_t>(payload));
    std::memcpy(b.data() + at + 16, &sum, 8);
    at += 24 + static_cast<size_t>(payload);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moex;
  static fuzz::ScratchFile scratch(".trace");
  std::vector<uint8_t> bytes(data, data + size);
  FixChecksums(bytes);
  const std::string& path = scratch.Write(bytes.data(), bytes.size());
  return fuzz::ExpectOnlyMoexErrors([&] {
    trace::TraceReader reader(path);
    for (const std::string& name : reader.tensors().Names()) {
      const TensorView& t = reader.tensors().Get(name);
      fuzz::Expect(t.nbytes == DTypeBytes(t.dtype, t.numel()), name + ": size != shape");
    }
    const trace::TraceHeader& h = reader.header();
    for (int pass = 0; pass < 2; ++pass) {
      trace::TraceEvent event;
      while (reader.Next(&event)) {
        if (event.kind != trace::TraceEvent::kIteration) continue;
        for (const trace::TraceGate& g : event.iteration.gates) {
          for (int32_t id : g.ids)
            fuzz::Expect(id >= 0 && id < h.model.num_experts, "expert id outside the model");
          fuzz::Expect(g.layer >= 0 && g.layer < h.model.num_layers, "layer outside the model");
        }
      }
      reader.Rewind();
    }
  });
}

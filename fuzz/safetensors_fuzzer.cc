// libFuzzer target: a safetensors image (JSON header and data). A successful parse must give
// views inside the input whose byte counts match their shapes.
#include "fuzz/fuzz_support.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moex;
  return fuzz::ExpectOnlyMoexErrors([&] {
    SafetensorsFile file(fuzz::Bytes(data, size), "fuzz input");
    const auto* lo = reinterpret_cast<const std::byte*>(data);
    for (const TensorView& t : file.tensors()) {
      fuzz::Expect(t.nbytes == DTypeBytes(t.dtype, t.numel()), t.name + ": size != shape");
      fuzz::Expect(t.nbytes == 0 || (t.data >= lo && t.data + t.nbytes <= lo + size),
                   t.name + ": view outside the input");
    }
  });
}

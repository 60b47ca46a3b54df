// libFuzzer target: a GGUF image. The file parser (metadata, tensor infos), then the model
// adapter over it (ModelConfigFromGguf, HF-named weights incl. the Q/K un-permutation) and
// its vocabulary as a tokenizer, as `moex generate --model x.gguf` would use them.
#include <memory>

#include "fuzz/fuzz_support.h"
#include "io/gguf_file.h"
#include "model/gguf_model.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moex;
  static fuzz::ScratchFile scratch(".gguf");
  fuzz::ExpectOnlyMoexErrors([&] {
    auto file = std::make_shared<const GgufFile>(fuzz::Bytes(data, size), "fuzz input");
    for (const auto& [key, value] : file->metadata()) (void)value.ToString();
    const auto* lo = reinterpret_cast<const std::byte*>(data);
    for (const GgufTensorInfo& info : file->tensor_infos()) {
      const TensorView* t = file->FindTensor(info.name);  // Throws for unsupported types.
      fuzz::Expect(t != nullptr, info.name + ": listed but not found");
      fuzz::Expect(t->nbytes == DTypeBytes(t->dtype, t->numel()), info.name + ": size != shape");
      fuzz::Expect(t->nbytes == 0 || (t->data >= lo && t->data + t->nbytes <= lo + size),
                   info.name + ": view outside the input");
    }
    const ModelConfig config = ModelConfigFromGguf(*file);
    auto weights = MakeGgufWeightSource(file, config);
    for (const std::string& name : weights->Names()) {
      const TensorView& t = weights->Get(name);
      fuzz::Expect(t.nbytes == DTypeBytes(t.dtype, t.numel()), name + ": size != shape");
    }
  });
  // The vocabulary, on its own: a file without a model still has to fail cleanly.
  fuzz::ExpectOnlyMoexErrors([&] {
    Tokenizer tokenizer(LoadGgufTokenizerSpec(scratch.Write(data, size)));
    const std::vector<int32_t> ids = tokenizer.Encode("Hello world, <s> 123 é", true);
    (void)tokenizer.Decode(ids);
  });
  return 0;
}

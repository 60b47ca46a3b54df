// libFuzzer target: a tokenizer.json (HF tokenizers' format). A tokenizer that loads must
// encode and decode text, including its own source, without crashing; decoded text is
// valid UTF-8 (U+FFFD for cut sequences).
#include <string_view>

#include "fuzz/fuzz_support.h"
#include "text/tokenizer.h"
#include "text/tokenizer_utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moex;
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  return fuzz::ExpectOnlyMoexErrors([&] {
    Tokenizer tokenizer(ParseTokenizerJson(json, "", "fuzz input"));
    for (std::string_view text :
         {std::string_view("Hello, world! <|endoftext|> 123 \xc3\xa9\xcc\x81"),
          json.substr(0, 512)}) {
      const std::vector<int32_t> ids = tokenizer.Encode(text, true);
      for (int32_t id : ids)
        fuzz::Expect(id >= 0 && id < tokenizer.vocab_size(), "id outside the vocabulary");
      fuzz::Expect(IsValidUtf8(tokenizer.Decode(ids)), "decoded text is not UTF-8");
    }
    // Every id, also those no text encodes to.
    std::vector<int32_t> all;
    for (int32_t id = 0; id < tokenizer.vocab_size() && id < 4096; ++id) all.push_back(id);
    fuzz::Expect(IsValidUtf8(tokenizer.Decode(all)), "decoded vocabulary is not UTF-8");
  });
}

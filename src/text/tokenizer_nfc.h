// Unicode Normalization Form C, for tokenizer.json files whose normalizer is {"type": "NFC"}.
// The tables are generated from Python's unicodedata (see tokenizer_nfc_table.cc); text that
// holds no character NFC could change (nearly all text) is passed through untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moex {

// Input must be valid UTF-8. Returns false (and leaves *out alone) when s is already NFC.
bool NfcIfNeeded(std::string_view s, std::string* out);

std::string Nfc(std::string_view s);

namespace nfc_data {

struct CombiningClass {
  char32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  uint32_t offset;  // into kDecompositionPool; the full canonical decomposition
  uint32_t length;
};
struct Composition {
  char32_t first;
  char32_t second;
  char32_t composite;
};
struct CodeRange {
  char32_t first;
  char32_t last;
};

extern const CombiningClass kCombiningClasses[];
extern const size_t kNumCombiningClasses;
extern const char32_t kDecompositionPool[];
extern const Decomposition kDecompositions[];
extern const size_t kNumDecompositions;
extern const Composition kCompositions[];
extern const size_t kNumCompositions;
// Characters that may change under NFC or change a neighbour (combining marks, composition
// second halves, singletons); text without any is already normalized.
extern const CodeRange kUnstableRanges[];
extern const size_t kNumUnstableRanges;

}  // namespace nfc_data
}  // namespace moex

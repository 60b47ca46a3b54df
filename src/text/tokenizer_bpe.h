// The BPE merge loop shared by byte-level BPE (ranks from tokenizer.json merges) and
// SentencePiece BPE (ranks from piece scores). Symbols are token ids; kNoSymbol marks a symbol
// outside the vocabulary, which never merges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moex {

class BpeMerges {
 public:
  static constexpr int32_t kNoSymbol = -1;

  // Lower rank merges first. A pair added twice keeps its first (best) rank.
  void Add(int32_t left, int32_t right, int32_t merged, int32_t rank);
  size_t size() const { return count_; }

  // Applies merges to symbols in place until none applies: always the lowest-rank pair, the
  // leftmost one among equals (the order of HF tokenizers and of SentencePiece).
  void Apply(std::vector<int32_t>* symbols) const;

 private:
  struct Entry {
    uint64_t key;
    int32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Entry* Find(int32_t a, int32_t b) const;
  void Prefetch(int32_t a, int32_t b) const;
  void Grow();
  void ApplyShort(std::vector<int32_t>* symbols) const;
  void ApplyLong(std::vector<int32_t>* symbols) const;

  std::vector<Entry> table_;  // open addressing, power-of-two size
  size_t count_ = 0;
};

}  // namespace moex

// A fixed-size, direct-mapped cache from short words to their token ids. BPE on a word costs
// far more than a lookup, and running text repeats its words. A colliding word simply replaces
// the older entry; memory stays bounded whatever the input.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace moex {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 22;
  static constexpr size_t kMaxIds = 8;

  explicit WordCache(size_t slots_log2 = 17) : slots_(size_t{1} << slots_log2) {}

  // Appends the cached ids of word to out; false on a miss.
  bool Lookup(std::string_view word, uint64_t hash, std::vector<int32_t>* out) const {
    const Slot& s = slots_[hash & (slots_.size() - 1)];
    SpinLock lock(&busy_);
    if (s.hash != hash || s.word_len != word.size() ||
        std::memcmp(s.word, word.data(), word.size()) != 0) {
      return false;
    }
    // A few ids: a plain loop beats vector::insert's memmove call.
    for (uint8_t k = 0; k < s.num_ids; ++k) out->push_back(s.ids[k]);
    return true;
  }

  void Store(std::string_view word, uint64_t hash, const int32_t* ids, size_t num_ids) {
    if (word.size() > kMaxWordBytes || num_ids > kMaxIds) return;
    Slot& s = slots_[hash & (slots_.size() - 1)];
    SpinLock lock(&busy_);
    s.hash = hash;
    s.word_len = static_cast<uint8_t>(word.size());
    std::memcpy(s.word, word.data(), word.size());
    s.num_ids = static_cast<uint8_t>(num_ids);
    std::memcpy(s.ids, ids, num_ids * sizeof(int32_t));
  }

  // Starts loading a word's slot; the table is larger than the CPU caches, so lookups issued
  // a few words ahead hide most of the memory latency.
  void Prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[hash & (slots_.size() - 1)]); }

  static uint64_t Hash(std::string_view word) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
    for (char c : word) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
    return h;
  }

 private:
  // One cache line per slot.
  struct alignas(64) Slot {
    uint64_t hash = 0;
    uint8_t word_len = 0xFF;  // matches no word: empty slot
    uint8_t num_ids = 0;
    char word[kMaxWordBytes];
    int32_t ids[kMaxIds];
  };
  // Held for a few dozen cycles at a time: a spin lock costs less than a mutex here.
  class SpinLock {
   public:
    explicit SpinLock(std::atomic_flag* flag) : flag_(flag) {
      while (flag_->test_and_set(std::memory_order_acquire)) {
      }
    }
    ~SpinLock() { flag_->clear(std::memory_order_release); }

   private:
    std::atomic_flag* flag_;
  };

  std::vector<Slot> slots_;
  mutable std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
};

}  // namespace moex

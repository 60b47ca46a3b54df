// A minimal byte-level BPE tokenizer (tokenizer.json and tokenizer_config.json) sized to a
// model's vocabulary, for models with random weights: text prompts, --chat and decoding work
// on them as on a real checkpoint, and every id the model can produce decodes.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

namespace moex {

struct ByteTokenizerFiles {
  nlohmann::json tokenizer;  // tokenizer.json
  nlohmann::json config;     // tokenizer_config.json (BOS/EOS names, a simple chat template)
};

// Exactly `vocab_size` ids: the special tokens at the ids the model's config gives them
// (bos_id < 0: none), the 256 byte tokens at the lowest free ids, and "<|reserved_N|>" in
// every id left. No merges: each byte of text is one token. Throws Error when the
// vocabulary cannot hold the bytes and the special tokens.
ByteTokenizerFiles ByteLevelTokenizerFor(int vocab_size, int bos_id,
                                         const std::vector<int>& eos_ids);

}  // namespace moex

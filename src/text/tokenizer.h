// Text <-> token ids, exactly as each model's own tokenizer does it.
//
// Two algorithms cover the supported families:
//   - byte-level BPE (GPT-2/GPT-NeoX as in OLMoE, Qwen2/Qwen3, DeepSeek): NFC, regex
//     pre-tokenizer, bytes mapped to printable characters, merges by rank;
//   - SentencePiece BPE (Mixtral/Mistral/Llama): spaces become U+2581 with a dummy prefix,
//     merges by piece score, byte fallback for characters outside the vocabulary.
// Loaders read tokenizer.json (+ tokenizer_config.json), tokenizer.model, or a GGUF's
// tokenizer.ggml.* metadata into a TokenizerSpec; Tokenizer builds its tables from that.
// A Tokenizer is immutable after construction and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "text/tokenizer_added.h"
#include "text/tokenizer_bpe.h"
#include "text/tokenizer_cache.h"
#include "text/tokenizer_regex.h"

namespace moex {

enum class TokenizerKind { kByteLevelBpe, kSentencePieceBpe };

// SentencePiece piece types (sentencepiece_model.proto; GGUF token_type uses the same numbers).
enum class PieceType : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Where SentencePiece puts its dummy "▁" prefix: on every text span between added tokens
// (legacy HF and llama.cpp), only on the first span of the input, or nowhere.
enum class SpacePrefix { kNever, kFirst, kEverySpan };

struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::kByteLevelBpe;
  std::string source;  // file path, for messages

  std::vector<std::string> vocab;  // id -> piece as stored; gaps are empty strings
  // Merge order. Byte-level BPE and tokenizer.json SentencePiece files list merges; when empty,
  // SentencePiece ranks every split of a piece by the piece's score (higher merges first).
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<float> scores;           // SentencePiece scores, parallel to vocab
  std::vector<PieceType> piece_types;  // parallel to vocab; empty means all normal
  std::vector<AddedToken> added_tokens;

  // Byte-level BPE.
  bool nfc = false;
  std::vector<std::string> split_patterns;  // Isolated splits, applied in order
  bool add_prefix_space = false;            // ByteLevel add_prefix_space

  // SentencePiece.
  SpacePrefix space_prefix = SpacePrefix::kEverySpan;
  bool byte_fallback = false;
  bool remove_extra_whitespaces = false;
  bool split_on_space_mark = false;  // Metaspace split=true: every "▁" starts a new word
  bool strip_leading_space_on_decode = true;

  int32_t unk_id = -1;
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;  // the first is the one the template writes
  bool add_bos = false;          // whether the model expects a BOS at the start of a prompt
  std::string chat_template;     // raw Jinja source, empty when the checkpoint has none
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerSpec spec);
  ~Tokenizer();

  // parse_special: match added/special tokens written in the text (HF's default). With false,
  // "<|im_end|>" in user text is ordinary characters.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special = true) const;
  // Invalid UTF-8 produced by a cut sequence is replaced with U+FFFD; DecodeBytes keeps it.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;
  std::string DecodeBytes(std::span<const int32_t> ids, bool skip_special = false) const;

  // The bytes one token stands for in running text (SentencePiece "▁" already a space).
  const std::string& TokenBytes(int32_t id) const;
  // The piece as stored in the vocabulary ("Ġthe", "▁the", "<|im_end|>").
  const std::string& TokenText(int32_t id) const;
  std::optional<int32_t> TokenId(std::string_view piece) const;
  bool IsSpecial(int32_t id) const;

  TokenizerKind kind() const { return spec_.kind; }
  int32_t vocab_size() const { return static_cast<int32_t>(spec_.vocab.size()); }
  int32_t bos_id() const { return spec_.bos_id; }
  const std::vector<int32_t>& eos_ids() const { return spec_.eos_ids; }
  bool IsEos(int32_t id) const;
  bool add_bos_default() const { return spec_.add_bos; }
  const std::vector<AddedToken>& added_tokens() const { return spec_.added_tokens; }
  const std::string& chat_template() const { return spec_.chat_template; }
  const std::string& source() const { return spec_.source; }
  const TokenizerSpec& spec() const { return spec_; }
  // SentencePiece drops the dummy-prefix space at the start of decoded text.
  bool strips_leading_space() const {
    return spec_.kind == TokenizerKind::kSentencePieceBpe && spec_.strip_leading_space_on_decode &&
           spec_.space_prefix != SpacePrefix::kNever;
  }

 private:
  void BuildByteLevel();
  void BuildSentencePiece();
  void EncodeByteLevelSpan(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeSentencePieceSpan(std::string_view text, bool prefix, std::vector<int32_t>* out) const;
  void EncodeWordCached(std::string_view word, bool byte_level, std::vector<int32_t>* out) const;
  void EncodeWordCached(std::string_view word, uint64_t hash, bool byte_level,
                        std::vector<int32_t>* out) const;
  // Encodes words given as spans of text, prefetching cache slots ahead.
  void EncodeWords(std::string_view text, const std::vector<TextSpan>& words, bool byte_level,
                   std::vector<int32_t>* out) const;
  void EncodeWord(std::string_view word, bool byte_level, std::vector<int32_t>* out) const;

  TokenizerSpec spec_;
  std::unordered_map<std::string, int32_t> piece_to_id_;
  std::vector<std::string> token_bytes_;
  std::vector<uint8_t> is_special_;
  BpeMerges merges_;
  std::vector<SplitRegex> splits_;
  AddedTokenMatcher raw_matcher_;         // tokens matched in the raw input
  AddedTokenMatcher normalized_matcher_;  // tokens matched after normalization
  AddedTokenMatcher all_matcher_;
  // Byte-level: the id of each byte's character; SentencePiece: the <0xXX> fallback pieces.
  int32_t byte_token_[256];
  std::string byte_to_char_[256];                     // byte-level alphabet, as UTF-8
  std::unordered_map<char32_t, int32_t> char_to_id_;  // SentencePiece single characters
  // Character pairs that occur inside some mergeable piece; text splits between any other
  // adjacent characters without changing the result (SentencePiece has no pre-tokenizer).
  // Pairs of ASCII characters and "▁" use a table, the rest a hash set.
  bool Joinable(char32_t a, char32_t b) const;
  std::vector<uint8_t> joinable_small_;
  std::unordered_set<uint64_t> joinable_;

  mutable WordCache cache_;
};

// Loads from a HF checkpoint directory (tokenizer.json, else tokenizer.model, together with
// tokenizer_config.json and generation_config.json when present), or a single file:
// tokenizer.json, a SentencePiece .model, or a .gguf.
std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& model_dir_or_file);

// The individual loaders (tokenizer_json.cc, tokenizer_sentencepiece.cc, tokenizer_gguf.cc).
// config_json may be empty.
TokenizerSpec ParseTokenizerJson(std::string_view tokenizer_json, std::string_view config_json,
                                 const std::string& source);
// Applies tokenizer_config.json (bos/eos tokens, add_bos_token, chat_template) to any spec.
void ApplyTokenizerConfig(std::string_view config_json, TokenizerSpec* spec);
TokenizerSpec ParseSentencePieceModel(std::string_view model_bytes, const std::string& source);
TokenizerSpec LoadGgufTokenizerSpec(const std::string& path);

// The pre-tokenizer regexes of a llama.cpp "tokenizer.ggml.pre" name; throws Error for names
// this engine does not know.
std::vector<std::string> PreTokenizerPatterns(const std::string& gguf_pre_name);

}  // namespace moex

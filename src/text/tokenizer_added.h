// Added tokens (special tokens and extra vocabulary) are found in the text before any BPE, as
// HF tokenizers does: leftmost-longest match, with each token's lstrip/rstrip/single_word rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moex {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;      // skipped by Decode(skip_special)
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool normalized = false;   // matched in normalized text rather than in the raw input
  bool single_word = false;  // only matches as a whole word
};

// One piece of input after added-token matching: either plain text [begin, end) or a token.
struct AddedSplit {
  size_t begin = 0;
  size_t end = 0;
  int32_t token = -1;  // -1: plain text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<const AddedToken*>& tokens);
  bool empty() const { return tokens_.empty(); }

  // Splits text into plain spans and matched tokens, in order. Plain spans may be empty.
  void Split(std::string_view text, std::vector<AddedSplit>* out) const;

 private:
  struct Node {
    int32_t first_child = -1;
    int32_t sibling = -1;
    int32_t token = -1;  // index into tokens_ when a token ends here
    uint8_t byte = 0;
  };
  // Longest token starting at pos, or -1; *end receives its end.
  int32_t LongestAt(std::string_view text, size_t pos, size_t* end) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
  bool first_byte_[256] = {};
  int single_first_byte_ = -1;  // the only first byte of all tokens, or -1
};

}  // namespace moex

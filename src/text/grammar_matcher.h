// Matching generated tokens against a Grammar (text/grammar.h), and the mask of the tokens the
// grammar allows next (docs/grammar.md).
//
// The state is a set of parse stacks (a pushdown automaton, as llama.cpp's grammar sampler),
// advanced byte by byte. Stacks are interned nodes (position, parent) and stack sets are
// interned too, so a state is one integer and each (state, byte) transition is computed once
// and then read from a table: the matcher builds a DFA over the states it meets, lazily.
//
// FillMask walks a TokenTrie of the vocabulary with that DFA, skipping every subtree whose
// prefix no stack accepts; the mask of a state is cached (bounded by bytes, least recently used
// out), so a state met again -- inside a JSON string, say -- costs a copy.
//
// Copies of a matcher share the interned states and the mask cache (under a mutex): copying
// and Reset are cheap, so each of n choices can hold its own. Bounds: more than
// GrammarMatcherOptions::max_stacks stacks in one state is an Error (an ambiguous grammar); a
// stack deeper than max_depth is dropped (that nesting is not allowed); when the interned
// states exceed max_states they are dropped and rebuilt from the live states.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/grammar.h"

namespace moex {

// The vocabulary's token byte strings in a trie (preorder arrays), built once per vocabulary.
// Special (control) tokens and empty tokens are left out: a grammar allows a special token
// only by naming its text (Grammar::special_tokens).
class TokenTrie {
 public:
  TokenTrie(std::vector<std::string> token_bytes, std::vector<bool> special);

  int32_t vocab_size() const { return int32_t(tokens_.size()); }
  const std::string& token(int32_t id) const { return tokens_[id]; }
  bool in_trie(int32_t id) const { return in_trie_[id]; }
  size_t num_nodes() const { return byte_.size(); }

 private:
  friend class GrammarMatcher;
  std::vector<std::string> tokens_;
  std::vector<bool> in_trie_;
  // Node i (preorder, the root left out): its byte, depth (1 = a first byte), the index just
  // past its subtree, and the tokens that end there: token_ids_[token_start_[i] ..
  // token_start_[i + 1]).
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<uint32_t> end_;
  std::vector<uint32_t> token_start_;
  std::vector<int32_t> token_ids_;
  uint16_t max_depth_ = 0;
};

struct GrammarMatcherOptions {
  size_t max_stacks = 1024;            // stacks in one state; more is an Error
  uint32_t max_depth = 2048;           // stack depth; deeper stacks are dropped
  size_t max_states = 1 << 18;         // interned states before they are rebuilt
  size_t mask_cache_bytes = 64 << 20;  // cached masks, least recently used out
};

class GrammarMatcher {
 public:
  // `trie` may be null when only Accept*/IsComplete are used.
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                 const GrammarMatcherOptions& options = {});
  ~GrammarMatcher();
  GrammarMatcher(const GrammarMatcher&);
  GrammarMatcher& operator=(const GrammarMatcher&);
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Back to the start of the grammar.
  void Reset();

  // Each returns false, leaving the state unchanged, when the grammar does not allow the bytes.
  bool AcceptByte(uint8_t byte);
  bool AcceptBytes(std::string_view bytes);
  // The token's bytes; an id outside the vocabulary, or a special token the grammar does not
  // name (Grammar::special_tokens), is never accepted.
  bool AcceptToken(int32_t id);

  // The grammar can end here (the caller then allows end-of-sequence).
  bool IsComplete() const { return complete_; }
  // Some byte can follow.
  bool CanContinue() const { return can_continue_; }

  // The allowed tokens as a bitset: bit (id % 64) of words[id / 64]; words is resized to
  // (vocab_size + 63) / 64. End-of-sequence is not in it: allow it when IsComplete().
  void FillMask(std::vector<uint64_t>* words);
  // The same as a sorted list of ids.
  std::vector<int32_t> AllowedTokens();
  static bool Allows(const std::vector<uint64_t>& words, int32_t id) {
    return (words[size_t(id) >> 6] >> (id & 63)) & 1;
  }

  struct Stats {
    uint64_t mask_hits = 0, mask_misses = 0;  // FillMask calls served by the cache or not
    size_t states = 0, stack_nodes = 0;       // interned now
    size_t rebuilds = 0;                      // times the interned states were dropped
  };
  Stats stats() const;

  // The parse stacks (grammar element positions, bottom first), for tests and debugging.
  std::vector<std::vector<uint32_t>> Stacks() const { return stacks_; }

 private:
  struct Space;
  void Sync() const;
  void Enter(int32_t state);

  std::shared_ptr<Space> space_;
  // The state: an interned id, valid while epoch_ matches the space's; stacks_ is its content,
  // kept to re-intern it after the space drops its states.
  mutable uint64_t epoch_ = 0;
  mutable int32_t state_ = -1;
  std::vector<std::vector<uint32_t>> stacks_;
  bool complete_ = false;
  bool can_continue_ = false;
};

}  // namespace moex

#include "text/tokenizer_added.h"

#include <cstring>

namespace moex {
namespace {

bool IsSpaceByte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool IsWordByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
         u == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens) {
  trie_.push_back(Node{});
  for (const AddedToken* t : tokens) {
    if (t->content.empty()) continue;
    const int32_t index = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(*t);
    int32_t node = 0;
    for (char ch : t->content) {
      const auto b = static_cast<uint8_t>(ch);
      int32_t child = trie_[node].first_child;
      while (child >= 0 && trie_[child].byte != b) child = trie_[child].sibling;
      if (child < 0) {
        child = static_cast<int32_t>(trie_.size());
        Node n;
        n.byte = b;
        n.sibling = trie_[node].first_child;
        trie_.push_back(n);
        trie_[node].first_child = child;
      }
      node = child;
    }
    if (trie_[node].token < 0) trie_[node].token = index;  // first definition wins
    first_byte_[static_cast<uint8_t>(t->content[0])] = true;
  }
  int distinct = 0;
  for (int b = 0; b < 256; ++b) {
    if (first_byte_[b]) {
      ++distinct;
      single_first_byte_ = b;
    }
  }
  if (distinct != 1) single_first_byte_ = -1;
}

int32_t AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t* end) const {
  int32_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    int32_t child = trie_[node].first_child;
    while (child >= 0 && trie_[child].byte != b) child = trie_[child].sibling;
    if (child < 0) break;
    node = child;
    if (trie_[node].token >= 0) {
      best = trie_[node].token;
      *end = i + 1;
    }
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<AddedSplit>* out) const {
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (single_first_byte_ >= 0) {
      // One possible first byte (typically '<'): memchr skips ahead much faster.
      const void* hit = std::memchr(text.data() + pos, single_first_byte_, text.size() - pos);
      if (hit == nullptr) break;
      pos = static_cast<const char*>(hit) - text.data();
    } else if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t end = 0;
    const int32_t index = LongestAt(text, pos, &end);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[index];
    if (t.single_word &&
        ((pos > 0 && IsWordByte(text[pos - 1])) || (end < text.size() && IsWordByte(text[end])))) {
      ++pos;
      continue;
    }
    size_t begin = pos;
    if (t.lstrip) {
      while (begin > plain_start && IsSpaceByte(text[begin - 1])) --begin;
    }
    if (t.rstrip) {
      while (end < text.size() && IsSpaceByte(text[end])) ++end;
    }
    out->push_back({plain_start, begin, -1});
    out->push_back({begin, end, t.id});
    plain_start = pos = end;
  }
  out->push_back({plain_start, text.size(), -1});
}

}  // namespace moex

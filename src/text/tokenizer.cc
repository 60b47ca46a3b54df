#include "text/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "text/tokenizer_nfc.h"
#include "text/tokenizer_utf8.h"

namespace moex {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// GPT-2's reversible map from bytes to printable characters, so BPE never sees whitespace or
// control bytes: printable Latin-1 bytes map to themselves, the rest to U+0100 onwards.
void ByteLevelAlphabet(char32_t byte_to_cp[256]) {
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    byte_to_cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
  }
}

uint64_t PairKey(char32_t a, char32_t b) {
  return (static_cast<uint64_t>(a) << 32) | b;
}

// Index into the small joinable table: ASCII below DEL, and "▁" in DEL's place.
int SmallIndex(char32_t c) {
  return c < 127 ? static_cast<int>(c) : c == 0x2581 ? 127 : -1;
}

// "<0x4A>" -> 0x4A, else -1.
int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = piece[i];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
  Check(!spec_.vocab.empty(), "tokenizer ", spec_.source, " has an empty vocabulary");
  for (int b = 0; b < 256; ++b) byte_token_[b] = -1;
  // Added tokens may sit past the end of the model vocabulary.
  for (const AddedToken& t : spec_.added_tokens) {
    Check(t.id >= 0, "tokenizer ", spec_.source, ": added token '", t.content, "' has no id");
    if (static_cast<size_t>(t.id) >= spec_.vocab.size()) spec_.vocab.resize(t.id + 1);
    if (spec_.vocab[t.id].empty()) spec_.vocab[t.id] = t.content;
  }
  const size_t n = spec_.vocab.size();
  piece_to_id_.reserve(n * 2);
  for (size_t id = 0; id < n; ++id) {
    if (!spec_.vocab[id].empty()) piece_to_id_.emplace(spec_.vocab[id], static_cast<int32_t>(id));
  }
  is_special_.assign(n, 0);
  for (const AddedToken& t : spec_.added_tokens) {
    if (t.special) is_special_[t.id] = 1;
  }
  if (!spec_.piece_types.empty()) {
    Check(spec_.piece_types.size() <= n, "tokenizer ", spec_.source, ": more types than pieces");
    for (size_t id = 0; id < spec_.piece_types.size(); ++id) {
      const PieceType t = spec_.piece_types[id];
      if (t == PieceType::kControl || t == PieceType::kUnknown) is_special_[id] = 1;
    }
  }
  for (int32_t id : spec_.eos_ids) {
    Check(id >= 0 && static_cast<size_t>(id) < n, "tokenizer ", spec_.source, ": eos id ", id,
          " is outside the vocabulary");
  }
  Check(spec_.bos_id < static_cast<int32_t>(n), "tokenizer ", spec_.source, ": bos id ",
        spec_.bos_id, " is outside the vocabulary");

  std::vector<const AddedToken*> raw, normalized, all;
  for (const AddedToken& t : spec_.added_tokens) {
    (t.normalized ? normalized : raw).push_back(&t);
    all.push_back(&t);
  }
  raw_matcher_ = AddedTokenMatcher(raw);
  normalized_matcher_ = AddedTokenMatcher(normalized);
  all_matcher_ = AddedTokenMatcher(all);

  if (spec_.kind == TokenizerKind::kByteLevelBpe) {
    BuildByteLevel();
  } else {
    BuildSentencePiece();
  }
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::BuildByteLevel() {
  char32_t byte_to_cp[256];
  ByteLevelAlphabet(byte_to_cp);
  std::unordered_map<char32_t, uint8_t> cp_to_byte;
  for (int b = 0; b < 256; ++b) {
    AppendUtf8(byte_to_cp[b], &byte_to_char_[b]);
    cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
    const auto it = piece_to_id_.find(byte_to_char_[b]);
    if (it != piece_to_id_.end()) byte_token_[b] = it->second;
  }
  for (const std::string& p : spec_.split_patterns) splits_.emplace_back(p);

  int32_t rank = 0;
  for (const auto& [left, right] : spec_.merges) {
    const auto a = piece_to_id_.find(left);
    const auto b = piece_to_id_.find(right);
    const auto m = piece_to_id_.find(left + right);
    if (a == piece_to_id_.end() || b == piece_to_id_.end() || m == piece_to_id_.end()) {
      Fail("tokenizer ", spec_.source, ": merge '", left, " ", right,
           "' names a piece missing from the vocabulary");
    }
    merges_.Add(a->second, b->second, m->second, rank++);
  }

  // Decoding maps each character back to its byte; a token with any character outside the
  // alphabet (an added token such as "  ") is taken as plain UTF-8, as HF's ByteLevel does.
  token_bytes_.resize(spec_.vocab.size());
  for (size_t id = 0; id < spec_.vocab.size(); ++id) {
    const std::string& piece = spec_.vocab[id];
    std::string bytes;
    size_t pos = 0;
    char32_t cp;
    bool mapped = true;
    while (pos < piece.size()) {
      if (!DecodeUtf8(piece, &pos, &cp)) {
        mapped = false;
        break;
      }
      const auto it = cp_to_byte.find(cp);
      if (it == cp_to_byte.end()) {
        mapped = false;
        break;
      }
      bytes.push_back(static_cast<char>(it->second));
    }
    token_bytes_[id] = mapped ? bytes : piece;
  }
}

void Tokenizer::BuildSentencePiece() {
  const size_t n = spec_.vocab.size();
  auto type_of = [&](size_t id) {
    return id < spec_.piece_types.size() ? spec_.piece_types[id] : PieceType::kNormal;
  };
  token_bytes_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& piece = spec_.vocab[id];
    const int byte = ParseBytePiece(piece);
    const bool byte_piece = type_of(id) == PieceType::kByte || (spec_.byte_fallback && byte >= 0);
    if (byte_piece && byte >= 0) {
      if (byte_token_[byte] < 0) byte_token_[byte] = static_cast<int32_t>(id);
      token_bytes_[id] = std::string(1, static_cast<char>(byte));
    } else {
      token_bytes_[id] = ReplaceAll(piece, kSpaceMark, " ");
    }
    // Single characters start the merge loop; control, byte and unused pieces never take part.
    const PieceType t = type_of(id);
    if (t != PieceType::kNormal && t != PieceType::kUserDefined) continue;
    if (byte_piece) continue;
    size_t pos = 0;
    char32_t cp;
    if (DecodeUtf8(piece, &pos, &cp) && pos == piece.size()) {
      char_to_id_.emplace(cp, static_cast<int32_t>(id));
    }
  }

  std::vector<int32_t> merged_ids;
  if (!spec_.merges.empty()) {
    int32_t rank = 0;
    for (const auto& [left, right] : spec_.merges) {
      const auto a = piece_to_id_.find(left);
      const auto b = piece_to_id_.find(right);
      const auto m = piece_to_id_.find(left + right);
      if (a == piece_to_id_.end() || b == piece_to_id_.end() || m == piece_to_id_.end()) {
        Fail("tokenizer ", spec_.source, ": merge '", left, " ", right,
             "' names a piece missing from the vocabulary");
      }
      merges_.Add(a->second, b->second, m->second, rank++);
      merged_ids.push_back(m->second);
    }
  } else {
    // SentencePiece merges two symbols whenever their concatenation is a piece, best score
    // first; every split of every normal piece is such a merge.
    Check(spec_.scores.size() == n, "tokenizer ", spec_.source, ": ", spec_.scores.size(),
          " scores for ", n, " pieces");
    std::vector<int32_t> order;
    for (size_t id = 0; id < n; ++id) {
      if (type_of(id) == PieceType::kNormal) order.push_back(static_cast<int32_t>(id));
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return spec_.scores[a] > spec_.scores[b]; });
    int32_t rank = 0;
    for (int32_t id : order) {
      const std::string& piece = spec_.vocab[id];
      bool any = false;
      size_t split = 0;
      char32_t cp;
      while (DecodeUtf8(piece, &split, &cp) && split < piece.size()) {
        const auto a = piece_to_id_.find(piece.substr(0, split));
        const auto b = piece_to_id_.find(piece.substr(split));
        if (a != piece_to_id_.end() && b != piece_to_id_.end() &&
            type_of(a->second) == PieceType::kNormal && type_of(b->second) == PieceType::kNormal) {
          merges_.Add(a->second, b->second, id, rank);
          any = true;
        }
      }
      if (any) merged_ids.push_back(id);
      ++rank;
    }
  }
  joinable_small_.assign(128 * 128, 0);
  for (int32_t id : merged_ids) {
    const std::string& piece = spec_.vocab[id];
    size_t pos = 0;
    char32_t prev = 0, cp;
    bool first = true;
    while (DecodeUtf8(piece, &pos, &cp)) {
      if (!first) {
        const int a = SmallIndex(prev), b = SmallIndex(cp);
        if (a >= 0 && b >= 0) {
          joinable_small_[a * 128 + b] = 1;
        } else {
          joinable_.insert(PairKey(prev, cp));
        }
      }
      first = false;
      prev = cp;
    }
  }
}

bool Tokenizer::Joinable(char32_t a, char32_t b) const {
  const int i = SmallIndex(a), j = SmallIndex(b);
  if (i >= 0 && j >= 0) return joinable_small_[i * 128 + j] != 0;
  return joinable_.count(PairKey(a, b)) != 0;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view input, bool add_bos,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(input.size() / 3 + 4);  // about 4 bytes per token in running text
  if (add_bos && spec_.bos_id >= 0) out.push_back(spec_.bos_id);
  std::string sanitized;
  std::string_view text = input;
  if (!IsValidUtf8(input)) {
    sanitized = SanitizeUtf8(input);
    text = sanitized;
  }
  std::vector<AddedSplit> splits;
  if (spec_.kind == TokenizerKind::kSentencePieceBpe) {
    // SentencePiece has no normalizer besides the space mark, so all added tokens match on
    // the raw text.
    if (parse_special && !all_matcher_.empty()) {
      all_matcher_.Split(text, &splits);
    } else {
      splits.push_back({0, text.size(), -1});
    }
    bool first = true;
    for (const AddedSplit& s : splits) {
      if (s.token >= 0) {
        out.push_back(s.token);
      } else {
        const bool prefix = spec_.space_prefix == SpacePrefix::kEverySpan ||
                            (spec_.space_prefix == SpacePrefix::kFirst && first);
        EncodeSentencePieceSpan(text.substr(s.begin, s.end - s.begin), prefix, &out);
      }
      first = false;
    }
    return out;
  }

  if (parse_special && !raw_matcher_.empty()) {
    raw_matcher_.Split(text, &splits);
  } else {
    splits.push_back({0, text.size(), -1});
  }
  std::string normalized;
  std::vector<AddedSplit> inner;
  for (const AddedSplit& s : splits) {
    if (s.token >= 0) {
      out.push_back(s.token);
      continue;
    }
    std::string_view span = text.substr(s.begin, s.end - s.begin);
    if (span.empty()) continue;
    if (spec_.nfc && NfcIfNeeded(span, &normalized)) span = normalized;
    inner.clear();
    if (parse_special && !normalized_matcher_.empty()) {
      normalized_matcher_.Split(span, &inner);
    } else {
      inner.push_back({0, span.size(), -1});
    }
    for (const AddedSplit& t : inner) {
      if (t.token >= 0) {
        out.push_back(t.token);
      } else if (t.end > t.begin) {
        EncodeByteLevelSpan(span.substr(t.begin, t.end - t.begin), &out);
      }
    }
  }
  return out;
}

void Tokenizer::EncodeByteLevelSpan(std::string_view text, std::vector<int32_t>* out) const {
  std::string prefixed;
  if (spec_.add_prefix_space && !text.empty() && text[0] != ' ') {
    prefixed = " ";
    prefixed += text;
    text = prefixed;
  }
  std::vector<TextSpan> pieces{{0, text.size()}};
  std::vector<TextSpan> next;
  for (const SplitRegex& re : splits_) {
    next.clear();
    for (const TextSpan& p : pieces) re.Split(text, p, &next);
    pieces.swap(next);
  }
  EncodeWords(text, pieces, true, out);
}

void Tokenizer::EncodeWords(std::string_view text, const std::vector<TextSpan>& words,
                            bool byte_level, std::vector<int32_t>* out) const {
  constexpr size_t kAhead = 8;
  uint64_t hashes[kAhead];
  const size_t n = words.size();
  auto hash_of = [&](size_t i) {
    return WordCache::Hash(text.substr(words[i].begin, words[i].end - words[i].begin));
  };
  for (size_t i = 0; i < n && i < kAhead; ++i) {
    hashes[i] = hash_of(i);
    cache_.Prefetch(hashes[i]);
  }
  for (size_t i = 0; i < n; ++i) {
    const uint64_t hash = hashes[i % kAhead];
    if (i + kAhead < n) {
      hashes[i % kAhead] = hash_of(i + kAhead);
      cache_.Prefetch(hashes[i % kAhead]);
    }
    EncodeWordCached(text.substr(words[i].begin, words[i].end - words[i].begin), hash, byte_level,
                     out);
  }
}

void Tokenizer::EncodeSentencePieceSpan(std::string_view text, bool prefix,
                                        std::vector<int32_t>* out) const {
  std::string collapsed;
  if (spec_.remove_extra_whitespaces) {
    // Trim, and squeeze runs of spaces to one (SentencePiece's normalizer option).
    for (char c : text) {
      if (c == ' ' && (collapsed.empty() || collapsed.back() == ' ')) continue;
      collapsed.push_back(c);
    }
    while (!collapsed.empty() && collapsed.back() == ' ') collapsed.pop_back();
    text = collapsed;
  }
  if (text.empty()) return;
  std::string norm;
  norm.reserve(text.size() + text.size() / 4 + 3);
  if (prefix) norm.append(kSpaceMark);
  for (char c : text) {
    if (c == ' ') {
      norm.append(kSpaceMark);
    } else {
      norm.push_back(c);
    }
  }
  // Cut into words wherever no piece spans the boundary, so each word can be cached.
  std::vector<TextSpan> words;
  size_t word_start = 0;
  size_t pos = 0;
  char32_t prev = 0, cp;
  bool have_prev = false;
  while (pos < norm.size()) {
    const size_t at = pos;
    if (!DecodeUtf8(norm, &pos, &cp)) {
      ++pos;
      cp = 0xFFFD;
    }
    const bool cut =
        spec_.split_on_space_mark ? (cp == 0x2581 && at > 0) : (have_prev && !Joinable(prev, cp));
    if (cut) {
      words.push_back({word_start, at});
      word_start = at;
    }
    prev = cp;
    have_prev = true;
  }
  words.push_back({word_start, norm.size()});
  EncodeWords(norm, words, false, out);
}

void Tokenizer::EncodeWordCached(std::string_view word, bool byte_level,
                                 std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (word.size() > WordCache::kMaxWordBytes) {
    EncodeWord(word, byte_level, out);
    return;
  }
  EncodeWordCached(word, WordCache::Hash(word), byte_level, out);
}

void Tokenizer::EncodeWordCached(std::string_view word, uint64_t hash, bool byte_level,
                                 std::vector<int32_t>* out) const {
  if (word.size() > WordCache::kMaxWordBytes) {
    EncodeWord(word, byte_level, out);
    return;
  }
  if (byte_level && word.size() == 1) {
    // A single byte is its own token; no cache needed.
    const int32_t id = byte_token_[static_cast<uint8_t>(word[0])];
    if (id >= 0) out->push_back(id);
    return;
  }
  if (cache_.Lookup(word, hash, out)) return;
  const size_t before = out->size();
  EncodeWord(word, byte_level, out);
  cache_.Store(word, hash, out->data() + before, out->size() - before);
}

void Tokenizer::EncodeWord(std::string_view word, bool byte_level,
                           std::vector<int32_t>* out) const {
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  if (byte_level) {
    for (char c : word) {
      // HF BPE without an unk token drops bytes missing from the vocabulary.
      const int32_t id = byte_token_[static_cast<uint8_t>(c)];
      if (id >= 0) symbols.push_back(id);
    }
    merges_.Apply(&symbols);
    out->insert(out->end(), symbols.begin(), symbols.end());
    return;
  }
  // Characters outside the vocabulary carry their offset, encoded as -(offset + 2).
  size_t pos = 0;
  char32_t cp;
  while (pos < word.size()) {
    const size_t at = pos;
    if (!DecodeUtf8(word, &pos, &cp)) {
      ++pos;
      cp = 0xFFFD;
    }
    const auto it = char_to_id_.find(cp);
    symbols.push_back(it != char_to_id_.end() ? it->second : -static_cast<int32_t>(at) - 2);
  }
  merges_.Apply(&symbols);
  bool last_unk = false;
  for (int32_t s : symbols) {
    if (s >= 0) {
      out->push_back(s);
      last_unk = false;
      continue;
    }
    size_t at = static_cast<size_t>(-s - 2);
    size_t end = at;
    if (!DecodeUtf8(word, &end, &cp)) end = at + 1;
    bool all_bytes = spec_.byte_fallback;
    for (size_t i = at; all_bytes && i < end; ++i) {
      all_bytes = byte_token_[static_cast<uint8_t>(word[i])] >= 0;
    }
    if (all_bytes) {
      for (size_t i = at; i < end; ++i) out->push_back(byte_token_[static_cast<uint8_t>(word[i])]);
      last_unk = false;
    } else if (spec_.unk_id >= 0 && !last_unk) {
      out->push_back(spec_.unk_id);  // consecutive unknowns fuse into one
      last_unk = true;
    }
  }
}

std::string Tokenizer::DecodeBytes(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && is_special_[id]) continue;
    out += token_bytes_[id];
  }
  if (strips_leading_space() && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes = DecodeBytes(ids, skip_special);
  if (IsValidUtf8(bytes)) return bytes;
  return SanitizeUtf8(bytes);
}

const std::string& Tokenizer::TokenBytes(int32_t id) const {
  Check(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary of ",
        spec_.source);
  return token_bytes_[id];
}

const std::string& Tokenizer::TokenText(int32_t id) const {
  Check(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary of ",
        spec_.source);
  return spec_.vocab[id];
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view piece) const {
  const auto it = piece_to_id_.find(std::string(piece));
  if (it == piece_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && is_special_[id] != 0;
}

bool Tokenizer::IsEos(int32_t id) const {
  return std::find(spec_.eos_ids.begin(), spec_.eos_ids.end(), id) != spec_.eos_ids.end();
}

}  // namespace moex

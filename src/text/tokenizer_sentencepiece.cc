// Reads a SentencePiece tokenizer.model (a serialized ModelProto) into a TokenizerSpec. The
// protobuf wire format is decoded directly; only the fields tokenization needs are read.
#include <cstring>

#include "core/error.h"
#include "text/tokenizer.h"

namespace moex {
namespace {

// One field of a protobuf message.
struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t varint = 0;     // wire types 0, 1 and 5 (fixed values as raw bits)
  std::string_view bytes;  // wire type 2
};

class WireReader {
 public:
  WireReader(std::string_view data, const std::string& source) : data_(data), source_(source) {}
  bool Next(Field* f) {
    if (pos_ >= data_.size()) return false;
    const uint64_t key = Varint();
    f->number = static_cast<uint32_t>(key >> 3);
    f->wire_type = static_cast<uint32_t>(key & 7);
    switch (f->wire_type) {
      case 0:
        f->varint = Varint();
        break;
      case 1:
        f->varint = Fixed(8);
        break;
      case 5:
        f->varint = Fixed(4);
        break;
      case 2: {
        const uint64_t n = Varint();
        Check(n <= data_.size() - pos_, "SentencePiece model ", source_,
              " is truncated (length-delimited field past the end)");
        f->bytes = data_.substr(pos_, n);
        pos_ += n;
        break;
      }
      default:
        Fail("SentencePiece model ", source_, " has an unsupported wire type ", f->wire_type);
    }
    return true;
  }

 private:
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      Check(pos_ < data_.size(), "SentencePiece model ", source_, " is truncated (varint)");
      const auto b = static_cast<uint8_t>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (b < 0x80) return v;
    }
    Fail("SentencePiece model ", source_, " has a malformed varint");
  }
  uint64_t Fixed(size_t n) {
    Check(n <= data_.size() - pos_, "SentencePiece model ", source_, " is truncated (fixed)");
    uint64_t v = 0;
    std::memcpy(&v, data_.data() + pos_, n);  // little-endian host
    pos_ += n;
    return v;
  }

  std::string_view data_;
  size_t pos_ = 0;
  const std::string& source_;
};

float AsFloat(uint64_t bits) {
  const auto b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

int32_t AsInt32(uint64_t v) {
  return static_cast<int32_t>(static_cast<uint32_t>(v));
}

}  // namespace

TokenizerSpec ParseSentencePieceModel(std::string_view model_bytes, const std::string& source) {
  TokenizerSpec spec;
  spec.kind = TokenizerKind::kSentencePieceBpe;
  spec.source = source;
  // ModelProto defaults (sentencepiece_model.proto).
  int model_type = 1;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool treat_whitespace_as_suffix = false;
  std::string normalizer_name;
  bool has_charsmap = false;
  int32_t unk_id = 0, bos_id = 1, eos_id = 2;

  WireReader top(model_bytes, source);
  Field f;
  while (top.Next(&f)) {
    if (f.number == 1 && f.wire_type == 2) {
      WireReader piece(f.bytes, source);
      Field p;
      std::string text;
      float score = 0;
      auto type = PieceType::kNormal;
      while (piece.Next(&p)) {
        if (p.number == 1 && p.wire_type == 2) text = std::string(p.bytes);
        if (p.number == 2 && p.wire_type == 5) score = AsFloat(p.varint);
        if (p.number == 3 && p.wire_type == 0) {
          Check(p.varint >= 1 && p.varint <= 6, "SentencePiece model ", source, ": piece type ",
                p.varint, " is unknown");
          type = static_cast<PieceType>(p.varint);
        }
      }
      spec.vocab.push_back(std::move(text));
      spec.scores.push_back(score);
      spec.piece_types.push_back(type);
    } else if (f.number == 2 && f.wire_type == 2) {
      WireReader trainer(f.bytes, source);
      Field t;
      while (trainer.Next(&t)) {
        if (t.wire_type != 0) continue;
        if (t.number == 3) model_type = static_cast<int>(t.varint);
        if (t.number == 24) treat_whitespace_as_suffix = t.varint != 0;
        if (t.number == 35) spec.byte_fallback = t.varint != 0;
        if (t.number == 40) unk_id = AsInt32(t.varint);
        if (t.number == 41) bos_id = AsInt32(t.varint);
        if (t.number == 42) eos_id = AsInt32(t.varint);
      }
    } else if (f.number == 3 && f.wire_type == 2) {
      WireReader normalizer(f.bytes, source);
      Field n;
      while (normalizer.Next(&n)) {
        if (n.number == 1 && n.wire_type == 2) normalizer_name = std::string(n.bytes);
        if (n.number == 2 && n.wire_type == 2) has_charsmap = !n.bytes.empty();
        if (n.number == 3 && n.wire_type == 0) add_dummy_prefix = n.varint != 0;
        if (n.number == 4 && n.wire_type == 0) remove_extra_whitespaces = n.varint != 0;
      }
    }
  }
  Check(!spec.vocab.empty(), "SentencePiece model ", source, " has no pieces");
  Check(model_type == 2, "SentencePiece model ", source, " is of type ", model_type,
        "; only BPE (2) is supported");
  Check(!treat_whitespace_as_suffix, "SentencePiece model ", source,
        ": treat_whitespace_as_suffix is not supported");
  Check(!has_charsmap || normalizer_name == "identity", "SentencePiece model ", source,
        ": normalization rule '", normalizer_name, "' is not supported (only identity)");

  spec.space_prefix = add_dummy_prefix ? SpacePrefix::kEverySpan : SpacePrefix::kNever;
  spec.strip_leading_space_on_decode = add_dummy_prefix;
  spec.remove_extra_whitespaces = remove_extra_whitespaces;
  const int32_t n = static_cast<int32_t>(spec.vocab.size());
  spec.unk_id = unk_id < n ? unk_id : -1;
  spec.bos_id = bos_id >= 0 && bos_id < n ? bos_id : -1;
  spec.add_bos = spec.bos_id >= 0;
  if (eos_id >= 0 && eos_id < n) spec.eos_ids.push_back(eos_id);
  // Control pieces (<s>, </s>) and the unknown piece are special tokens written as text, as HF
  // treats them; user-defined pieces are always matched whole.
  for (int32_t id = 0; id < n; ++id) {
    const PieceType t = spec.piece_types[id];
    if (t != PieceType::kControl && t != PieceType::kUnknown && t != PieceType::kUserDefined) {
      continue;
    }
    AddedToken a;
    a.content = spec.vocab[id];
    a.id = id;
    a.special = t != PieceType::kUserDefined;
    spec.added_tokens.push_back(std::move(a));
  }
  return spec;
}

}  // namespace moex

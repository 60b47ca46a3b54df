#include "dist/expert_messages.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.h"

namespace moex::dist {

namespace {

constexpr uint32_t kMagic = 0x5045584d;  // "MXEP" little-endian.

// Fixed-size header shared by both message shapes; the counters travel in every message so
// that rank 0 always has a worker's latest figures.
struct Header {
  uint32_t magic = kMagic;
  uint32_t kind = 0;
  int32_t layer = 0;
  int32_t count = 0;       // Experts (layer messages) or text bytes (text messages).
  int64_t token_rows = 0;  // kLayer: distinct token rows; else 0.
  WorkerCounters counters;
};
static_assert(sizeof(Header) == 96);

struct WireSpan {
  int32_t expert;
  int32_t pad;
  int64_t rows;
};
static_assert(sizeof(WireSpan) == 16);

Header ReadHeader(std::span<const std::byte> bytes) {
  Check(bytes.size() >= sizeof(Header), "an expert-parallel message of ", bytes.size(),
        " bytes is shorter than its header");
  Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  Check(h.magic == kMagic, "not an expert-parallel message (bad magic)");
  return h;
}

bool IsLayerKind(uint32_t kind) {
  return kind == static_cast<uint32_t>(MessageKind::kLayer) ||
         kind == static_cast<uint32_t>(MessageKind::kOutputs);
}

}  // namespace

std::vector<std::byte> EncodeLayer(const LayerMessage& m) {
  Header h;
  h.kind = static_cast<uint32_t>(m.kind);
  h.layer = m.layer;
  h.count = static_cast<int32_t>(m.experts.size());
  h.counters = m.counters;
  const size_t spans = m.experts.size() * sizeof(WireSpan);
  // Token indices padded to 8 bytes, so the rows after them stay aligned.
  const size_t indices = (m.token_of_row.size_bytes() + 7) / 8 * 8;
  const size_t rows = m.rows.size_bytes();
  std::vector<std::byte> out(sizeof h + spans + indices + rows);
  h.token_rows = m.token_rows;
  std::memcpy(out.data(), &h, sizeof h);
  for (size_t i = 0; i < m.experts.size(); ++i) {
    const WireSpan w{m.experts[i].expert, 0, m.experts[i].rows};
    std::memcpy(out.data() + sizeof h + i * sizeof w, &w, sizeof w);
  }
  if (!m.token_of_row.empty())
    std::memcpy(out.data() + sizeof h + spans, m.token_of_row.data(), m.token_of_row.size_bytes());
  if (rows > 0) std::memcpy(out.data() + sizeof h + spans + indices, m.rows.data(), rows);
  return out;
}

std::vector<std::byte> EncodeText(const TextMessage& m) {
  Header h;
  h.kind = static_cast<uint32_t>(m.kind);
  h.count = static_cast<int32_t>(m.text.size());
  h.counters = m.counters;
  std::vector<std::byte> out(sizeof h + m.text.size());
  std::memcpy(out.data(), &h, sizeof h);
  if (!m.text.empty()) std::memcpy(out.data() + sizeof h, m.text.data(), m.text.size());
  return out;
}

MessageKind KindOf(std::span<const std::byte> bytes) {
  const Header h = ReadHeader(bytes);
  Check(h.kind >= 1 && h.kind <= static_cast<uint32_t>(MessageKind::kReady),
        "an expert-parallel message of unknown kind ", h.kind);
  return static_cast<MessageKind>(h.kind);
}

LayerMessage DecodeLayer(std::span<const std::byte> bytes, int64_t d_model) {
  const Header h = ReadHeader(bytes);
  Check(IsLayerKind(h.kind), "expected a layer message, got kind ", h.kind);
  // The decoded spans view the buffer as int32 and float: it must be aligned for them (the
  // transport's buffers are vectors, which are).
  Check(reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) == 0,
        "a layer message in a buffer not aligned to 4 bytes");
  Check(d_model > 0, "a layer message needs a positive row width");
  Check(h.count >= 0, "a layer message with ", h.count, " experts");
  const bool inputs = h.kind == static_cast<uint32_t>(MessageKind::kLayer);
  Check(inputs ? h.token_rows >= 0 : h.token_rows == 0, "a layer message with ", h.token_rows,
        " token rows");
  size_t left = bytes.size() - sizeof h;
  const size_t spans = static_cast<size_t>(h.count) * sizeof(WireSpan);
  Check(left >= spans, "a layer message cut short in its expert list");
  left -= spans;
  LayerMessage m;
  m.kind = static_cast<MessageKind>(h.kind);
  m.layer = h.layer;
  m.counters = h.counters;
  m.token_rows = h.token_rows;
  // Every row costs at least 4 bytes (a token index, or a float of an output row), which
  // bounds the counts before anything is multiplied.
  const int64_t most = static_cast<int64_t>(left / sizeof(float));
  int64_t total_rows = 0;
  for (int32_t i = 0; i < h.count; ++i) {
    WireSpan w;
    std::memcpy(&w, bytes.data() + sizeof h + static_cast<size_t>(i) * sizeof w, sizeof w);
    Check(w.rows > 0 && w.rows <= most - total_rows, "a layer message gives expert ", w.expert, " ",
          w.rows, " rows, more than its ", left, " bytes carry");
    total_rows += w.rows;
    m.experts.push_back({w.expert, w.rows});
  }
  const size_t indices = inputs ? (static_cast<size_t>(total_rows) * 4 + 7) / 8 * 8 : 0;
  Check(left >= indices, "a layer message cut short in its token indices");
  left -= indices;
  const int64_t rows_sent = inputs ? h.token_rows : total_rows;
  // The count can be anything: bounded before it is multiplied, the message included.
  const bool fits = rows_sent <= static_cast<int64_t>(left / sizeof(float)) / d_model;
  if (!fits || left != static_cast<size_t>(rows_sent * d_model) * sizeof(float)) {
    const bool printable = rows_sent <= std::numeric_limits<int64_t>::max() / 4 / d_model;
    Fail("a layer message carries ", left, " bytes of rows; its ", rows_sent, " rows of ", d_model,
         " floats need ", printable ? std::to_string(rows_sent * d_model * 4) : "more");
  }
  const std::byte* at = bytes.data() + sizeof h + spans;
  if (inputs) {
    // The header is 96 bytes, each span 16 and the indices padded to 8, so the indices and
    // rows are aligned in any buffer the allocator returns.
    m.token_of_row = {reinterpret_cast<const int32_t*>(at), static_cast<size_t>(total_rows)};
    for (int32_t t : m.token_of_row)
      Check(t >= 0 && t < h.token_rows, "a layer message names token row ", t, " of ",
            h.token_rows);
  }
  m.rows = {reinterpret_cast<const float*>(at + indices), static_cast<size_t>(rows_sent * d_model)};
  return m;
}

TextMessage DecodeText(std::span<const std::byte> bytes) {
  const Header h = ReadHeader(bytes);
  Check(!IsLayerKind(h.kind), "expected a text message, got a layer message");
  Check(h.count >= 0 && static_cast<size_t>(h.count) == bytes.size() - sizeof h,
        "a text message of ", bytes.size() - sizeof h, " bytes says it has ", h.count);
  TextMessage m;
  m.kind = static_cast<MessageKind>(h.kind);
  m.counters = h.counters;
  m.text.assign(reinterpret_cast<const char*>(bytes.data() + sizeof h), bytes.size() - sizeof h);
  return m;
}

}  // namespace moex::dist

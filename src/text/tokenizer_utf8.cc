#include "text/tokenizer_utf8.h"

namespace moex {
namespace {

// Valid second-byte ranges per lead byte (Unicode table 3-7); other continuations are 80..BF.
bool SecondByteOk(uint8_t lead, uint8_t b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

int SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

}  // namespace

bool DecodeUtf8(std::string_view s, size_t* pos, char32_t* cp) {
  const size_t i = *pos;
  if (i >= s.size()) return false;
  const uint8_t lead = static_cast<uint8_t>(s[i]);
  const int len = SequenceLength(lead);
  if (len == 0 || i + len > s.size()) return false;
  if (len == 1) {
    *cp = lead;
    *pos = i + 1;
    return true;
  }
  if (!SecondByteOk(lead, static_cast<uint8_t>(s[i + 1]))) return false;
  char32_t c = lead & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return false;
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  *pos = i + len;
  return true;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s) {
  size_t pos = 0;
  char32_t cp;
  while (pos < s.size()) {
    // ASCII fast path: most text is mostly ASCII.
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    if (!DecodeUtf8(s, &pos, &cp)) return false;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  char32_t cp;
  while (pos < s.size()) {
    const size_t start = pos;
    if (DecodeUtf8(s, &pos, &cp)) {
      out.append(s.substr(start, pos - start));
    } else {
      // One U+FFFD per maximal invalid subpart, as Rust's from_utf8_lossy and Python do.
      AppendUtf8(0xFFFD, &out);
      const uint8_t lead = static_cast<uint8_t>(s[pos]);
      const int len = SequenceLength(lead);
      ++pos;
      for (int k = 1; k < len && pos < s.size(); ++k) {
        const uint8_t b = static_cast<uint8_t>(s[pos]);
        const bool ok = k == 1 ? SecondByteOk(lead, b) : (b & 0xC0) == 0x80;
        if (!ok) break;
        ++pos;
      }
    }
  }
  return out;
}

size_t Utf8CompletePrefix(std::string_view s) {
  // Only the last three bytes can start an unfinished sequence.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const int len = SequenceLength(b);
    if (len <= static_cast<int>(back)) return n;  // complete (or invalid: nothing to wait for)
    // Truncated: hold it back only if the bytes seen so far can still form a valid sequence.
    if (back >= 2 && !SecondByteOk(b, static_cast<uint8_t>(s[i + 1]))) return n;
    return i;
  }
  return n;
}

}  // namespace moex

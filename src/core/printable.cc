#include "core/printable.h"

#include <cstdint>
#include <cstdio>

namespace moex {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (1 for printable ASCII), or 0 when
// the byte there is a control character or does not start a valid sequence.
size_t PrintableLength(std::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  if (b < 0x20 || b == 0x7f) return 0;
  if (b < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if ((b & 0xe0) == 0xc0) {
    n = 2, cp = b & 0x1f;
  } else if ((b & 0xf0) == 0xe0) {
    n = 3, cp = b & 0x0f;
  } else if ((b & 0xf8) == 0xf0) {
    n = 4, cp = b & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<uint8_t>(s[i + k]);
    if ((c & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3f);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are not valid UTF-8.
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
  // C1 controls (U+0080..U+009F) move terminals too.
  if (cp < 0xa0) return 0;
  return n;
}

}  // namespace

bool IsPrintableText(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = PrintableLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string Printable(std::string_view s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (out.size() >= max_bytes) return out + "...";
    const size_t n = PrintableLength(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<uint8_t>(s[i]));
      out += hex;
      ++i;
    }
  }
  return out;
}

}  // namespace moex

// UTF-8 helpers shared by the tokenizers, the normalizer and the streaming decoder. Decoding is
// strict (no overlongs, no surrogates, nothing above U+10FFFF), as in Rust's str.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moex {

// Decodes one code point at s[*pos] and advances *pos. On an invalid or truncated sequence
// returns false and leaves *pos alone.
bool DecodeUtf8(std::string_view s, size_t* pos, char32_t* cp);

void AppendUtf8(char32_t cp, std::string* out);

bool IsValidUtf8(std::string_view s);

// Replaces every byte that is not part of a valid sequence with U+FFFD, so the result is valid.
std::string SanitizeUtf8(std::string_view s);

// Length of the longest prefix of s that ends on a code-point boundary, keeping back a tail that
// is a truncated but so-far-valid sequence (it may complete when more bytes arrive).
size_t Utf8CompletePrefix(std::string_view s);

}  // namespace moex

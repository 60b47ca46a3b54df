// Names read from a file (GGUF keys, tensor names), made safe to print in a message: a
// corrupt file must not write raw control bytes or broken UTF-8 to the user's terminal.
#pragma once

#include <string>
#include <string_view>

namespace moex {

// True when `s` is valid UTF-8 without control characters (C0, DEL).
bool IsPrintableText(std::string_view s);

// `s` with every control byte and every byte outside valid UTF-8 written as \xNN, cut to
// about `max_bytes` with "..." when longer.
std::string Printable(std::string_view s, size_t max_bytes = 120);

}  // namespace moex

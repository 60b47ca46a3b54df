// Errors: every failure a user can cause (bad file, bad argument, I/O error) is reported as a
// moex::Error with a message that names the thing at fault. The CLI prints it and exits 1.
// Check streams its parts only on failure, so pass the pieces, not a string built from them
// (write `if (!ok) Fail(..., ShapeString(s))` when a piece costs something to compute).
// Invariants of the code itself, which no input can break, are MOEX_DCHECK (core/dcheck.h).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace moex {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Builds a message from any streamable pieces: Fail("tensor ", name, " has shape ", s).
template <typename... Parts>
[[noreturn]] void Fail(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  throw Error(out.str());
}

template <typename... Parts>
void Check(bool condition, Parts&&... parts) {
  if (!condition) Fail(std::forward<Parts>(parts)...);
}

}  // namespace moex

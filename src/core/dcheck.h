// Internal invariants, apart from user-facing errors. moex::Check and Fail (core/error.h)
// report what a user can cause -- a bad file, a bad argument -- as a moex::Error in every
// build. MOEX_DCHECK states what the code itself guarantees: false means a bug in moex.
//
//   MOEX_DCHECK(begin <= end, "range [", begin, ", ", end, ")");
//
// Builds without NDEBUG (Debug, the sanitizer builds) test the condition and, when it is
// false, print the file, line, condition and message to stderr and abort. Release builds
// (NDEBUG) compile it out: the condition and the message are still type-checked but never
// evaluated. Either way the message is built only on failure.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace moex {

#ifdef NDEBUG
inline constexpr bool kDebugChecks = false;
#else
inline constexpr bool kDebugChecks = true;
#endif

template <typename... Parts>
[[noreturn]] [[gnu::cold]] void DcheckFailed(const char* file, int line, const char* condition,
                                             Parts&&... parts) {
  std::ostringstream message;
  (message << ... << std::forward<Parts>(parts));
  std::fprintf(stderr, "moex: internal error at %s:%d: check `%s` failed%s%s\n", file, line,
               condition, sizeof...(parts) ? ": " : "", message.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace moex

// MOEX_DCHECK with the switch given: `enabled` is a constant expression (tests use both).
#define MOEX_DCHECK_IF(enabled, condition, ...)                                        \
  do {                                                                                 \
    if ((enabled) && !(condition)) [[unlikely]]                                        \
      ::moex::DcheckFailed(__FILE__, __LINE__, #condition __VA_OPT__(, ) __VA_ARGS__); \
  } while (false)

#define MOEX_DCHECK(condition, ...) \
  MOEX_DCHECK_IF(::moex::kDebugChecks, condition __VA_OPT__(, ) __VA_ARGS__)

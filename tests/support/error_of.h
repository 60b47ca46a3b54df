// The message of the moex::Error a call throws, for tests of error wording.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace moex::testing {

// The Error's message, or "" when `f` succeeds.
inline std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace moex::testing

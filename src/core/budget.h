// The byte budgets users type (--host-budget, --budget, --prefix-cache): a size with a
// binary unit or a percentage of a whole.
#pragma once

#include <cstdint>
#include <string>

namespace moex {

// Parses "4GiB", "512MiB", "1.5G", "123456" (bytes) or "25%" (of `all_bytes`); throws
// Error naming a malformed, negative or too large budget.
int64_t ParseBudget(const std::string& text, int64_t all_bytes);

}  // namespace moex
